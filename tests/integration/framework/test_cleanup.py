"""Purging the framework's tables (framework.cleanup): old rows go in bounded batches, young rows
stay, and a retention shorter than the broker's check or redelivery window is refused -- on a real
SQLite file and the real PostgreSQL."""

from __future__ import annotations

import inspect
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, Table, event, insert, select, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import create_async_engine

from broker_service.domain.config import parse_delay_levels
from broker_service.domain.consumers.copies import RETRY_FIRST_LEVEL, retry_level
from broker_service.settings import BrokerSettings
from framework import cleanup, inbox, txlog
from framework.cleanup import (
    BrokerTimings,
    RetentionTooShortError,
    TableName,
    minimum_retention,
    purge,
    purge_async,
    purge_inbox,
    purge_transaction_log,
)
from framework.consumer_base import ConsumerBase
from framework.errors import ConfigurationError, HalfMQError
from framework.message import LocalTransactionState, Message
from framework.tables import inbox as inbox_table
from framework.tables import local_transaction_log as log_table
from tests.integration.framework.conftest import Bank

DAY = 86_400
LOG_WINDOW = 6 + 15 * 30 + 3  # immunity + check max x interval + push answer time: 7m 39s
INBOX_WINDOW = 16 * 30 + 17_140  # 16 invisibilities + the delays of levels 3..18: 4h 53m 40s


def _now_ms() -> int:
    return int(time.time() * 1000)


def add_rows(bank: Bank, name: str, ages: list[float], prefix: str) -> None:
    """Rows of the table ``name`` (``log`` or ``inbox``) created ``ages`` seconds ago."""
    now = _now_ms()
    with bank.engine.begin() as conn:
        for n, age in enumerate(ages):
            created = now - int(age * 1000)
            if name == "log":
                row = {"transaction_id": f"{prefix}{n}", "producer_group": "bob-bank"}
                row |= {"topic": "transfers", "msg_id": f"m-{prefix}{n}", "state": "COMMIT"}
                conn.execute(insert(log_table).values(row | {"created_at": created}))
            else:
                row = {"consumer_group": "smith-bank", "dedup_key": f"{prefix}{n}"}
                row |= {"msg_id": f"m-{prefix}{n}", "topic": "transfers"}
                conn.execute(insert(inbox_table).values(row | {"created_at": created}))


def keys(bank: Bank, name: str) -> set[str]:
    column = log_table.c.transaction_id if name == "log" else inbox_table.c.dedup_key
    with bank.engine.connect() as conn:
        return set(conn.execute(select(column)).scalars())


# -- the windows ---------------------------------------------------------------------------------


def test_the_default_timings_are_the_brokers_and_the_consumers() -> None:
    """The framework restates the broker's defaults (it may not import them): they must agree."""
    fields = BrokerSettings.model_fields
    timings = BrokerTimings()
    assert timings.check_immunity_seconds == fields["transaction_timeout_seconds"].default
    assert (
        timings.transaction_check_interval_seconds
        == fields["transaction_check_interval_seconds"].default
    )
    assert timings.transaction_check_max == fields["transaction_check_max"].default
    assert timings.check_timeout_seconds == fields["check_timeout_seconds"].default
    assert timings.message_delay_level == fields["message_delay_level"].default
    assert timings.max_reconsume_times == fields["max_reconsume_times"].default
    consumer = inspect.signature(ConsumerBase.__init__).parameters["invisible_seconds"]
    assert timings.invisible_seconds == consumer.default
    assert cleanup.RETRY_FIRST_LEVEL == RETRY_FIRST_LEVEL


def test_the_windows_with_the_default_timings() -> None:
    log, box = minimum_retention("log"), minimum_retention("inbox")
    assert (log.table, log.seconds, log.minimum_seconds) == (
        "halfmq_local_transaction_log",
        LOG_WINDOW,
        LOG_WINDOW + DAY,
    )
    assert (box.table, box.seconds, box.minimum_seconds) == (
        "halfmq_inbox",
        INBOX_WINDOW,
        INBOX_WINDOW + DAY,
    )
    # The inbox window from the broker's own retry schedule (level 3 + k, capped at the last).
    levels_ms = parse_delay_levels(BrokerSettings.model_fields["message_delay_level"].default)
    delays = sum(levels_ms[retry_level(k, len(levels_ms)) - 1] for k in range(16)) / 1000
    assert box.seconds == 16 * 30 + delays
    assert "7m 39s" in log.how
    assert "4h 53m 40s" in box.how
    assert "levels 3-18" in box.how


def test_the_windows_follow_the_timings() -> None:
    timings = BrokerTimings(
        check_immunity_seconds=60,
        transaction_check_interval_seconds=10,
        transaction_check_max=3,
        check_timeout_seconds=0,
        message_delay_level="1s 2s 3s 4s",
        max_reconsume_times=3,
        invisible_seconds=100,
        margin_seconds=3600,
    )
    log = minimum_retention("log", timings)
    assert (log.seconds, log.minimum_seconds) == (60 + 3 * 10, 60 + 30 + 3600)
    box = minimum_retention("inbox", timings)
    # Retries wait levels 3, 4 and 4 again (past the last level, the last): 3 + 4 + 4 seconds.
    assert (box.seconds, box.minimum_seconds) == (3 * 100 + 11, 311 + 3600)
    assert minimum_retention("inbox", BrokerTimings(max_reconsume_times=0)).seconds == 0


def test_bad_timings_and_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        BrokerTimings(message_delay_level="1s fast")
    with pytest.raises(ValueError, match="invisible_seconds"):
        BrokerTimings(invisible_seconds=0)
    with pytest.raises(ValueError, match="transaction_check_max"):
        BrokerTimings(transaction_check_max=0)
    with pytest.raises(ValueError, match="'outbox'"):
        minimum_retention("outbox")  # type: ignore[arg-type]


def test_durations() -> None:
    assert cleanup.parse_duration("7d") == 7 * DAY
    assert cleanup.parse_duration("36h") == 36 * 3600
    assert cleanup.parse_duration("90m") == 5400
    assert cleanup.parse_duration("500ms") == 0.5
    assert cleanup.parse_duration("45") == 45
    with pytest.raises(ValueError, match="not a duration"):
        cleanup.parse_duration("7 days")
    assert cleanup.format_duration(INBOX_WINDOW + DAY) == "1d 4h 53m 40s"
    assert cleanup.format_duration(0.25) == "250ms"
    assert cleanup.format_duration(0) == "0s"
    assert cleanup.format_duration(59.2) == "1m"  # rounded up: the minimum shown passes


# -- refusing a retention ------------------------------------------------------------------------


def test_a_retention_shorter_than_the_window_is_refused(bank: Bank) -> None:
    add_rows(bank, "log", [3 * DAY], "old-")
    add_rows(bank, "inbox", [3 * DAY], "old-")
    short = INBOX_WINDOW + DAY - 1
    with pytest.raises(RetentionTooShortError) as refused:
        purge_inbox(bank.engine, short)
    error = refused.value
    assert isinstance(error, ValueError)
    assert isinstance(error, ConfigurationError)
    assert isinstance(error, HalfMQError)
    assert error.window.minimum_seconds == INBOX_WINDOW + DAY
    assert error.keep_seconds == short
    message = str(error)
    assert "keeping 1d 4h 53m 39s of halfmq_inbox is too short" in message
    assert "16 redeliveries (max_reconsume_times) x 30s (invisible_seconds)" in message
    assert "4h 53m 40s" in message
    assert "keep at least 1d 4h 53m 40s" in message
    assert "BrokerTimings(max_reconsume_times=..." in message
    assert "--max-reconsume-times" in message
    assert "--margin" in message

    with pytest.raises(RetentionTooShortError, match="15 checks \\(transaction_check_max\\)"):
        purge_transaction_log(bank.engine, timedelta(hours=1), dry_run=True)
    assert keys(bank, "log") == {"old-0"}
    assert keys(bank, "inbox") == {"old-0"}

    # Exactly the minimum is enough; so is a shorter one when the timings say so.
    assert purge_inbox(bank.engine, INBOX_WINDOW + DAY).rows == 1
    fast = BrokerTimings(transaction_check_max=1, margin_seconds=0)
    assert purge_transaction_log(bank.engine, timedelta(hours=1), timings=fast).rows == 1


# -- purging -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["log", "inbox"])
def test_old_rows_go_young_rows_stay(bank: Bank, name: TableName) -> None:
    add_rows(bank, name, [30 * DAY, 8 * DAY, 7 * DAY + 60, 7 * DAY + 1], "old-")
    add_rows(bank, name, [7 * DAY - 60, 2 * DAY, 3600, 0], "young-")
    other = "inbox" if name == "log" else "log"
    add_rows(bank, other, [30 * DAY], "other-")

    purged = purge(bank.engine, name, timedelta(days=7))

    assert purged.rows == 4
    assert purged.batches == 1
    assert not purged.dry_run
    assert purged.table == ("halfmq_local_transaction_log" if name == "log" else "halfmq_inbox")
    assert abs(purged.cutoff_ms - (_now_ms() - 7 * DAY * 1000)) < 60_000
    assert keys(bank, name) == {"young-0", "young-1", "young-2", "young-3"}
    assert keys(bank, other) == {"other-0"}  # the other table is not touched
    assert purge(bank.engine, name, 7 * DAY).rows == 0


def test_a_dry_run_counts_and_deletes_nothing(bank: Bank) -> None:
    add_rows(bank, "log", [10 * DAY] * 12, "old-")
    add_rows(bank, "log", [DAY], "young-")
    before = keys(bank, "log")

    counted = purge_transaction_log(bank.engine, timedelta(days=7), dry_run=True, batch_size=5)

    assert (counted.rows, counted.batches, counted.dry_run) == (12, 0, True)
    assert keys(bank, "log") == before
    done = purge_transaction_log(bank.engine, timedelta(days=7), batch_size=5)
    assert (done.rows, done.batches, done.dry_run) == (12, 3, False)
    assert keys(bank, "log") == {"young-0"}


@pytest.mark.parametrize("name", ["log", "inbox"])
def test_batches_are_bounded_each_its_own_transaction(bank: Bank, name: TableName) -> None:
    add_rows(bank, name, [10 * DAY + n for n in range(35)], "old-")
    add_rows(bank, name, [3600, 60], "young-")
    deletes, commits = _watch(bank.engine)

    purged = purge(bank.engine, name, 7 * DAY, batch_size=10, pause_seconds=0)

    assert (purged.rows, purged.batches) == (35, 4)
    assert deletes == [10, 10, 10, 5]
    assert len(commits) == 4  # each batch committed on its own
    assert keys(bank, name) == {"young-0", "young-1"}


def _watch(engine: Engine) -> tuple[list[int], list[int]]:
    """The row counts of the DELETE statements run on ``engine`` and its commits, as they come."""
    deletes: list[int] = []
    commits: list[int] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            deletes.append(cursor.rowcount)

    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "commit", lambda conn: commits.append(1))
    return deletes, commits


def test_the_oldest_rows_are_found_by_the_created_at_index(bank: Bank) -> None:
    """The batch's inner select reads ``ix_<table>_created_at`` (PostgreSQL: when it may choose;
    on tables this small it would rather scan)."""
    names: list[tuple[TableName, Table]] = [("log", log_table), ("inbox", inbox_table)]
    for name, table in names:
        plan = cleanup._Plan.make(name, 7 * DAY, None, 1000, 0)
        dialect = bank.engine.dialect
        sql = str(plan.delete().compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        with bank.engine.begin() as conn:
            if dialect.name == "sqlite":
                rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all()
            else:
                assert isinstance(dialect, postgresql.base.PGDialect)
                conn.execute(text("SET LOCAL enable_seqscan = off"))
                rows = conn.exec_driver_sql(f"EXPLAIN {sql}").all()
        plan_text = "\n".join(str(row[-1]) for row in rows)
        assert f"ix_{table.name}_created_at" in plan_text, plan_text


async def test_purge_async(bank: Bank) -> None:
    add_rows(bank, "inbox", [9 * DAY + n for n in range(23)], "old-")
    add_rows(bank, "inbox", [DAY], "young-")
    url = bank.engine.url
    if url.get_backend_name() == "sqlite":
        url = url.set(drivername="sqlite+aiosqlite")
    engine = create_async_engine(url)
    try:
        counted = await purge_async(engine, "inbox", timedelta(days=7), dry_run=True)
        assert (counted.rows, counted.dry_run) == (23, True)
        assert len(keys(bank, "inbox")) == 24
        done = await purge_async(engine, "inbox", timedelta(days=7), batch_size=10)
        assert (done.rows, done.batches) == (23, 3)
        assert keys(bank, "inbox") == {"young-0"}
        with pytest.raises(RetentionTooShortError):
            await purge_async(engine, "log", timedelta(hours=2))
    finally:
        await engine.dispose()


# -- what the rows are for -----------------------------------------------------------------------


def test_rows_inside_the_window_keep_answering_checks_and_duplicates(bank: Bank) -> None:
    """Purging at the shortest retention leaves the log row a check answers COMMIT from and the
    inbox row a redelivery collides with.  Once such a row is purged, the check would answer
    ROLLBACK for a committed transaction: why the retention may not be shorter than the window."""
    committed = Message("transfers", keys=["t-1"]).evolve(transaction_id="tx-1")
    state, error = txlog.run_local(bank.Session, lambda s, m, a: None, committed, None, "bob-bank")
    assert (state, error) == (LocalTransactionState.COMMIT_MESSAGE, None)
    delivered = Message("transfers", keys=["t-1"])
    assert inbox.consume(bank.Session, lambda s, m: None, delivered, "smith-bank", "t-1").ok

    shortest = minimum_retention("inbox").minimum_seconds
    assert purge_transaction_log(bank.engine, shortest).rows == 0
    assert purge_inbox(bank.engine, shortest).rows == 0
    check = txlog.check(bank.Session, committed, "bob-bank")
    assert check is LocalTransactionState.COMMIT_MESSAGE
    again = inbox.consume(bank.Session, lambda s, m: None, delivered, "smith-bank", "t-1")
    assert again.duplicate

    aged = _now_ms() - int((shortest + 60) * 1000)
    with bank.engine.begin() as conn:
        conn.execute(update(log_table).values(created_at=aged))
    assert purge_transaction_log(bank.engine, shortest).rows == 1
    assert txlog.check(bank.Session, committed, "bob-bank") is (
        LocalTransactionState.ROLLBACK_MESSAGE
    )
