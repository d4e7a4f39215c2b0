"""Helpers for the writer's tests on a cluster of their own (the ``cluster`` fixture): hold the
synchronous standby back, so that a commit on the primary is made locally and then waits for it
(``SyncRep``), and a small table to write to."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Engine, text

from drills.pg_cluster import PgCluster


@contextmanager
def standby_stopped(cluster: PgCluster) -> Iterator[None]:
    """SIGSTOP the standby's processes (its walreceiver among them) and SIGCONT them after.  The
    postmaster's children are each a session of their own, so a signal to its process group
    would not reach them: they are stopped one by one."""
    pid = cluster.standby.pid
    assert pid is not None
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    children = [int(child) for child in found.stdout.split()]
    for child in children:
        os.kill(child, signal.SIGSTOP)
    try:
        yield
    finally:
        for child in children:
            os.kill(child, signal.SIGCONT)


def waiting_for_standby(dsn: str) -> list[int]:
    """The backends whose commit waits for the synchronous standby."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        return [int(pid) for (pid,) in rows.fetchall()]


def create_kv(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE kv (k TEXT PRIMARY KEY)"))


def put(value: str) -> Callable[[Any], str]:
    """A unit storing ``value`` once: idempotent, as the broker's writes are when run again (a
    duplicate send, a repeated commit)."""

    def unit(tx: Any) -> str:
        tx.conn.execute(text("INSERT INTO kv (k) VALUES (:k) ON CONFLICT DO NOTHING"), {"k": value})
        return value

    return unit
