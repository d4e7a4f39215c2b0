"""Ids the broker makes: msg ids (when the client sent none) and transaction ids."""

from __future__ import annotations

import os
import time

_PID = os.getpid() & 0xFFFF


def new_id() -> str:
    """A 32-hex-digit id that sorts by creation time: 48 bits of ms, 16 of pid, 64 random."""
    ms = time.time_ns() // 1_000_000
    return f"{ms:012X}{_PID:04X}{int.from_bytes(os.urandom(8), 'big'):016X}"
