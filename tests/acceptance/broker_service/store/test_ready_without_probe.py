"""A broker started while its PostgreSQL has no primary becomes ready by itself once a primary is
back: nothing probes ``/readyz`` until it has, and its own work -- this broker's presence beat
first -- reaches the store on its own.

The cluster is built from the machine's PostgreSQL binaries (``drills.pg_cluster``) on free
loopback ports (the ``cluster`` fixture, conftest.py); the machine's own cluster is not touched.
Without the binaries the test skips locally and fails under ``CI=true``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest

from broker_service.store import migrate
from drills.pg_cluster import PgCluster
from tests.support import BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BROKER = "broker-started-without-primary"


def _beats(cluster: PgCluster) -> int:
    """This broker's beats the store holds (0 or 1 row), read on the primary, not through it."""
    try:
        with psycopg.connect(cluster.primary.dsn("halfmq"), connect_timeout=2) as conn:
            row = conn.execute(
                b"SELECT count(*) FROM brokers WHERE broker_id = %s", (BROKER,)
            ).fetchone()
    except psycopg.Error:
        return 0
    return 0 if row is None else int(row[0])


def test_a_broker_started_without_a_primary_becomes_ready_unprobed(
    cluster: PgCluster, tmp_path: Path
) -> None:
    url = cluster.url()
    migrate.upgrade(url)
    cluster.kill_primary()  # no primary: the standby takes no writes (target_session_attrs)

    broker = BrokerProcess(
        url,
        free_port(),
        tmp_path / "broker.log",
        "--no-scheduler",
        env={"HALFMQ_BROKER_BEAT_SECONDS": "0.5"},
        broker_id=BROKER,
    )
    broker.start_unready()
    try:
        wait_until(
            lambda: "not ready" in broker.log_path.read_text(errors="replace"),
            60,
            "the broker to start, not ready",
        )
        cluster.promote()
        # No /readyz, no request: only the broker's own work may find the new primary.
        wait_until(lambda: _beats(cluster) == 1, 60, "the broker's beat on the new primary")
        ready = httpx.get(f"{broker.url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        created = httpx.post(
            f"{broker.url}/v1/topics", json={"name": "after-failover", "queues": 1}, timeout=10
        )
        assert created.status_code < 300, created.text
    finally:
        broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log
