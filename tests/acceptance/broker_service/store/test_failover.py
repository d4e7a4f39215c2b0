"""A PostgreSQL primary killed under load and its synchronous standby promoted: the brokers, on a
multi-host URL, answer 503 with Retry-After (never 500) while there is no primary, reconnect by
themselves to the new one, and nothing acknowledged is lost, nothing rolled back delivered,
nothing resolved twice; their schedulers carry on on the new primary, one broker at a time.

The cluster is built from the machine's PostgreSQL binaries (``drills.pg_cluster``) on free
loopback ports; the machine's own cluster is not touched.  Without the binaries the test skips
locally and fails under ``CI=true`` (the ``cluster_tools`` fixture, conftest.py).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from broker_service.domain.retention.service import LEASE_MS
from broker_service.store.schema import transactions
from drills.failover import WRITES, Answer, Drill, Failover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PASSWORD = "failover-s3cret"  # in the brokers' URL: it must appear in no log line, no answer


@pytest.fixture
def drill(tmp_path: Path, cluster_tools: None) -> Drill:
    return Drill(tmp_path, brokers=2, workers=12, password=PASSWORD)


def test_primary_killed_under_load_loses_nothing_acknowledged(drill: Drill) -> None:
    with drill:
        rounds_before = [_purge_rounds(url) for url in drill.urls]
        counted_from = time.monotonic()
        drill.start_load()
        time.sleep(4)
        failover = drill.failover(detect_seconds=1.0)
        time.sleep(4)  # the load goes on, on the new primary
        drill.stop_load()
        settled = drill.settle(timeout=60)
        verdict = drill.check()
        rounds_after = [_purge_rounds(url) for url in drill.urls]
        counted_for = time.monotonic() - counted_from
        assert drill.cluster is not None
        checked_after = _resolved_by_check_since(drill.cluster.url(), failover.killed_at_ms)
    answers = drill.ledger.answers
    writes = [a for a in answers if a.kind in WRITES]

    # Nothing acknowledged is lost, nothing rolled back delivered, nothing resolved twice.
    assert verdict.lost == []
    assert verdict.wrong == []
    assert verdict.double == []
    assert verdict.unresolved == []
    assert settled, drill.unsettled
    assert drill.ledger.acknowledged(until=failover.killed) >= 50, "load before the kill"
    assert drill.ledger.acknowledged(since=failover.first_ok) >= 50, "load after the failover"

    # While there was no primary the brokers refused with 503 + Retry-After, never a 500; their
    # readiness said so, and says ready again after.
    _assert_refused_properly(failover, writes)
    _assert_readiness_followed(failover, [a for a in answers if a.kind == "readyz"])
    assert not [a for a in answers if a.status == 500]
    assert failover.recovery < 15, "the brokers reconnect by themselves, soon"

    # The check-back resolved, on the new primary, halves left to it; the purge rounds went on,
    # one broker holding the lease at a time.
    assert checked_after > 0
    _assert_purge_resumed(rounds_before, rounds_after, counted_for)

    # The logs tell the outage in two lines, without a stack trace or the password.
    logs = [broker.log_path.read_text(errors="replace") for broker in drill.brokers]
    assert any("the store cannot be reached; answering 503" in log for log in logs)
    assert any("the store is reachable again after" in log for log in logs)
    for log in logs:
        assert "Traceback" not in log
        assert PASSWORD not in log
        assert "postgres:***@" in log  # the URL is printed, masked


def _assert_refused_properly(failover: Failover, writes: list[Answer]) -> None:
    """Between the kill and the first write acknowledged on the new primary (the promotion at
    least: see :func:`_assert_readiness_followed`) every write that was not acknowledged was
    refused with 503 and Retry-After; over the whole run no write was answered otherwise."""
    end = max(failover.first_ok, failover.promoted)
    window = [a for a in writes if failover.killed <= a.done <= end and not 200 <= a.status < 300]
    refused = Counter(a.status for a in window)
    assert refused[503] > 0, f"nothing was refused in the window: {failover.statuses}"
    assert set(refused) == {503}, f"refusals other than 503 in the window: {refused}"
    assert all(a.retry_after for a in window), "a 503 without Retry-After"
    others = Counter(a.status for a in writes if not 200 <= a.status < 300)
    assert set(others) <= {503}, f"writes answered otherwise: {others}"


def _assert_readiness_followed(failover: Failover, probes: list[Answer]) -> None:
    """``/readyz`` answered 503 in the window, and each broker's last answer is 200 (a probe that
    ran in the window does not keep a broker refusing).  The window runs from the kill to the
    promotion at least: the killed postmaster's backends and walsender can still commit a write
    for a few milliseconds (a CI run saw one acknowledged 41 ms after the kill, on the standby
    too), so the first write acknowledged after the kill may come before the outage does.  A probe
    counts when it was out during the window."""
    end = max(failover.first_ok, failover.promoted)
    window = [a.status for a in probes if a.sent <= end and a.done >= failover.killed]
    assert 503 in window, f"/readyz in the window: {Counter(window)}"
    last = {a.broker: a.status for a in sorted(probes, key=lambda a: a.done)}
    assert set(last.values()) == {200}, f"/readyz at the end: {last}"


_ROUNDS = re.compile(r'^halfmq_retention_rounds_total\{result="(\w+)"\} ([0-9.e+]+)$', re.M)


def _purge_rounds(url: str) -> Counter[str]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return Counter({result: int(float(n)) for result, n in _ROUNDS.findall(text)})


def _assert_purge_resumed(
    before: list[Counter[str]], after: list[Counter[str]], seconds: float
) -> None:
    """After the failover the brokers still complete purge rounds (``purged`` or ``idle``), and
    the lease keeps them one at a time.  A round that found nothing old enough (``idle``) takes
    no lease, so both brokers may run those; a round that deleted something holds the lease for
    :data:`LEASE_MS` past its last unit, renewed by each, so within a shorter run at most one
    broker can have purged."""
    ran = [
        a["purged"] + a["idle"] - b["purged"] - b["idle"]
        for b, a in zip(before, after, strict=True)
    ]
    assert sum(ran) > 0, f"no purge round completed: {before} -> {after}"
    purged = [a["purged"] - b["purged"] for b, a in zip(before, after, strict=True)]
    if seconds < LEASE_MS / 1000:
        assert min(purged) == 0, f"both brokers purged within one lease: {before} -> {after}"


def _resolved_by_check_since(url: str, since_ms: int) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(transactions.c.transaction_id).where(
                    transactions.c.resolved_by == "check", transactions.c.resolved_at > since_ms
                )
            ).all()
    finally:
        engine.dispose()
    return len(rows)
