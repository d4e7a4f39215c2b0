"""Failed scheduler rounds during a store outage (``FailedRounds``, shared by the delay, check-back
and presence schedulers): the retries back off, up to a bound; the log says the first failure,
then at most one reminder a period with the count, and one line when a round works again.

The outage is real: the delay scheduler runs on the machine's PostgreSQL, in a schema that is
dropped under it, then created and migrated again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from urllib.parse import unquote

import pytest
from sqlalchemy import create_engine, text

from broker_service.domain.clock import now_ms
from broker_service.domain.config import DomainConfig
from broker_service.domain.errors import DomainError
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.schedulers.delays import DelayScheduler
from broker_service.schedulers.failures import FailedRounds
from broker_service.store import migrate
from broker_service.store.sql_store import SqlStore
from tests.support import PG_BASE_URL, open_store


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[SqlStore]:
    async with open_store(pg_url) as opened:
        yield opened


def _schema(url: str) -> str:
    return unquote(url).rsplit("search_path=", 1)[1]


def _sql(statement: str) -> None:
    engine = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


async def _until(predicate: object, what: str, seconds: float = 60) -> None:
    assert callable(predicate)
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "halfmq.delays" and r.levelno == level
    ]


async def test_delay_rounds_back_off_and_log_once_through_a_store_outage(
    pg_url: str, pg_store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="halfmq.delays")
    service = MessageService(pg_store, Sender(DomainConfig(), clock=now_ms))
    scheduler = DelayScheduler(service, poll_seconds=0.05, max_pause_seconds=0.4)
    schema = _schema(pg_url)
    assert await scheduler.run_round() <= 0.05, "the store works: the normal pace"

    _sql(f'DROP SCHEMA "{schema}" CASCADE')  # the store's tables are gone under the broker
    scheduler.start()
    try:
        await _until(lambda: scheduler.rounds.failures >= 6, "six failed rounds")
        assert scheduler.rounds.pause() == 0.4, "the pause doubled up to its bound"
        (first,) = _lines(caplog, logging.WARNING)
        assert first.startswith("releasing delayed messages failed: ")

        _sql(f'CREATE SCHEMA "{schema}"')
        migrate.upgrade(pg_url)
        await _until(lambda: not scheduler.rounds.failing, "a round to work again")
    finally:
        await scheduler.stop()

    assert len(_lines(caplog, logging.WARNING)) == 1, "one line for the whole outage"
    (recovered,) = _lines(caplog, logging.INFO)
    assert recovered.startswith("releasing delayed messages works again after ")
    failed = int(recovered.split("after ")[1].split()[0])
    assert failed >= 6
    assert "Traceback" not in caplog.text
    assert await scheduler.run_round() <= 0.05, "back to the normal pace"


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_are_reminded_at_most_once_a_period_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="halfmq.test")
    clock = ManualClock()
    rounds = FailedRounds(
        logging.getLogger("halfmq.test"),
        "testing",
        base=0.25,
        cap=5.0,
        remind_seconds=60,
        clock=clock,
    )
    outage = DomainError("the store failed: connection refused", code="STORE_UNAVAILABLE")
    pauses = []
    for _ in range(40):  # 40 failed rounds, 2 s apart: 78 s
        pauses.append(rounds.failed(outage))
        clock.now += 2
    rounds.succeeded()
    rounds.succeeded()

    assert pauses[:7] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert set(pauses[5:]) == {5.0}
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "testing failed: the store failed: connection refused"),
        (
            "WARNING",
            "testing still failing: 30 more failed rounds in the last 60 s, 31 since 60 s ago: "
            "the store failed: connection refused",
        ),
        ("INFO", "testing works again after 40 failed rounds over 80 s"),
    ]
    assert rounds.pause() == 0.25
