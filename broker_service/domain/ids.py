"""Ids the broker makes: msg ids (when the client sent none) and transaction ids.

Like RocketMQ's message ids, an id is a per-process prefix and a counter, so making one is one
string format: 12 hex digits of the process's start time in ms, 4 of its pid, 8 random, then an
8-digit counter (a new prefix is drawn if the counter ever wraps).  Ids of one process sort in the
order they were made.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

_lock = threading.Lock()
_WRAP = 1 << 32


def _new_prefix() -> str:
    ms = time.time_ns() // 1_000_000
    return f"{ms:012X}{os.getpid() & 0xFFFF:04X}{int.from_bytes(os.urandom(4), 'big'):08X}"


_prefix = _new_prefix()
_counter = itertools.count()


def new_id() -> str:
    """A unique 32-hex-digit id."""
    global _prefix, _counter
    n = next(_counter)  # itertools.count is atomic under the GIL
    if n >= _WRAP:
        with _lock:
            if n >= _WRAP:
                _prefix, _counter = _new_prefix(), itertools.count(1)
                n = 0
    return f"{_prefix}{n:08X}"
