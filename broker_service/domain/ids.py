"""Ids the broker makes: msg ids (when the client sent none) and transaction ids."""

from __future__ import annotations

import os
import random
import time

_PID = os.getpid() & 0xFFFF
# Seeded from the OS once; ids need uniqueness, not secrecy (a syscall per id cost more than the
# rest of building a message).
_random = random.Random(os.urandom(32))


def new_id() -> str:
    """A 32-hex-digit id that sorts by creation time: 48 bits of ms, 16 of pid, 64 random."""
    ms = time.time_ns() // 1_000_000
    return f"{ms:012X}{_PID:04X}{_random.getrandbits(64):016X}"
