"""Three brokers on one PostgreSQL, one of them SIGKILLed while it holds check-back claims: every
half is resolved exactly once, none is lost, and the dead broker's claimed halves are finished by
another broker once its claims expire.

Real processes on 127.0.0.1: three ``halfmq broker serve`` (``b0``, ``b1``, ``b2``), and a framework
producer over the list ``[b0, b1, b2]`` whose local transactions answer UNKNOW, so every half is
left to the check-back, answered by the producer's built-in check server (push mode).  The
producer sticks to ``b0``, the one killed, so its sends fail over too.  What is asserted is read
from the store's own records (:func:`drills.brokers.audit`): states, op records, real
messages, the brokers' ``CHECKED`` trace events; and from the check endpoint's log.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from broker_service.store import migrate
from broker_service.store.schema import transactions
from drills.brokers import (
    TOPIC,
    Audit,
    CheckEndpoint,
    CheckTimes,
    Fleet,
    audit,
    claims_of,
    endpoint_overlaps,
)
from framework.errors import HalfMQError
from tests.store_check import assert_transactions_consistent
from tests.support import wait_until

pytestmark = pytest.mark.slow

# Halves due 0.3 s after they are stored, rounds every 0.5 s, pushes time out after 2 s: a claim
# expires 0.5 + 2 x 2 = 4.5 s after it was made.
TIMES = CheckTimes(interval=0.5, timeout=2.0, transaction_timeout=0.3)
HOLD_MAX = 1.0  # seconds the endpoint holds its answers while the victim is killed (< timeout)


class Producing:
    """Halves left to the check-back, sent one after another from a thread until stopped."""

    def __init__(self, endpoint: CheckEndpoint) -> None:
        self.endpoint = endpoint
        self.sent: list[str] = []
        self.unacknowledged = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="many-brokers-producer")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self.sent.append(self.endpoint.send_unknown(n))
            except HalfMQError:
                self.unacknowledged += 1  # stored or not: the store's records say
            n += 1


def _resolved(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(func.count()).where(
                transactions.c.state.in_(("COMMITTED", "ROLLED_BACK"))
            )
            return int(conn.execute(query).scalar_one())
    finally:
        engine.dispose()


def _stored(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {r.transaction_id for r in conn.execute(select(transactions.c.transaction_id))}
    finally:
        engine.dispose()


def _answered_checks(url: str) -> float:
    """A live broker's count of push checks answered (its ``/metrics``)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(r'^halfmq_checks_total\{outcome="answered"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def _kill_holding_claims(
    fleet: Fleet, endpoint: CheckEndpoint, url: str
) -> tuple[float, dict[str, int]]:
    """SIGKILL ``b0`` while it holds claims whose pushes are in flight: the endpoint holds its
    answers (shorter than the push time-out, so the live brokers' pushes are only slowed) until
    ``b0`` is seen holding claims, then ``b0`` dies; returns the kill's time (epoch ms) and the
    claims it left (transaction id -> when each expires)."""
    victim = fleet.brokers[0]
    for _ in range(20):  # bounded: a round of b0 claims within an interval or two
        endpoint.hold()
        try:
            deadline = time.monotonic() + HOLD_MAX
            while time.monotonic() < deadline and not claims_of(url, victim.broker_id):
                time.sleep(0.02)
            if claims_of(url, victim.broker_id):
                victim.kill()
                return time.time() * 1000, claims_of(url, victim.broker_id)
        finally:
            endpoint.release()
        time.sleep(0.3)
    raise AssertionError("b0 never held a claim to be killed with")


def test_three_brokers_one_killed_every_half_resolved_once_by_the_store(
    pg_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(pg_url)
    fleet = Fleet(pg_url, 3, tmp_path, TIMES)
    endpoint: CheckEndpoint | None = None
    producing: Producing | None = None
    try:
        fleet.start()
        httpx.post(f"{fleet.urls[1]}/v1/topics", json={"name": TOPIC, "queues": 4}, timeout=10)
        endpoint = CheckEndpoint(fleet.urls)  # [b0, b1, b2]: sticks to b0, the one killed
        endpoint.start()
        producing = Producing(endpoint)
        producing.start()
        wait_until(lambda: _resolved(pg_url) >= 30, 30, "checks resolving halves")

        killed_ms, orphans = _kill_holding_claims(fleet, endpoint, pg_url)
        sent_at_kill = len(producing.sent)
        wait_until(lambda: len(producing.sent) > sent_at_kill + 5, 30, "sends after the kill")
        producing.stop()
        assert not fleet.brokers[0].alive
        assert all(broker.alive for broker in fleet.brokers[1:])
        assert orphans, "b0 died holding claims"

        stored = _stored(pg_url)
        wait_until(
            lambda: _resolved(pg_url) == len(stored),
            30 + TIMES.claim_expiry,
            "every stored half resolved",
        )
        result: Audit = audit(pg_url, stored)
        calls = endpoint.snapshot()
        answered = [_answered_checks(url) for url in fleet.urls[1:]]
    finally:
        if producing is not None:
            producing.stop()
        if endpoint is not None:
            with contextlib.suppress(Exception):
                endpoint.shutdown()
        fleet.stop()

    # None lost: every acknowledged half is in the store, and nothing stored is left open.
    sent = set(producing.sent)
    assert len(sent) >= 30
    # (The producer's first broker was b0: its sends after the kill went on through b1.)
    assert sent <= stored
    assert result.unresolved == []
    assert result.states.keys() <= {"COMMITTED", "ROLLED_BACK"}
    assert result.resolved_by == {"check": len(stored)}
    # Exactly once, as the producer's database says: one op record, one real message if committed.
    assert result.resolved_twice == []
    assert result.wrong == []
    assert_transactions_consistent(pg_url)
    # Never two checks of one half at once, by the brokers' CHECKED events and by the endpoint.
    assert result.checked_at_once == []
    at_once, again = endpoint_overlaps(calls)
    assert at_once == []
    # Both survivors checked; a half was asked twice only because b0 died holding its claim (or,
    # on a starved machine, because a check got no answer within the time-out: then asked again).
    assert all(count > 0 for count in answered), answered
    asked_again_rightly = orphans.keys() | set(result.check_failed)
    assert set(again) <= asked_again_rightly
    assert set(result.checked_again) <= asked_again_rightly
    # b0's claims expired before another broker finished each of them.
    for txid, until in orphans.items():
        assert result.resolved_at[txid] >= until, f"{txid} resolved before b0's claim expired"
        assert result.resolved_at[txid] > killed_ms
