"""Purging old rows of the framework's two tables, in bounded batches, never inside a window in
which the broker may still need them.

* ``halfmq_local_transaction_log``: a ``COMMIT`` row answers the broker's check of its
  transaction; deleted while a check may still come, the check would find nothing, insert its
  ``ROLLBACK`` marker and answer ROLLBACK for a transaction that committed.  So a row is kept
  longer than the broker checks a transaction: check immunity + ``transaction_check_max`` x
  ``transaction_check_interval_seconds`` + a push check's answer time.  A ``ROLLBACK`` marker
  stops a zombie local transaction (one whose first insert comes after the check); the framework
  makes that insert right after the prepare call answers, so past the window only a process frozen
  that long could still be one, and then its commit meets a half the broker already rolled back.
* ``halfmq_inbox``: a row makes a second delivery of a handled message a duplicate; deleted while
  the broker may still deliver the message again, that delivery would run the handler twice.  So
  a row is kept longer than the broker redelivers a message by itself: up to
  ``max_reconsume_times`` redeliveries, each after the consumer's invisibility ran out or after
  the retry delay of level ``3 + reconsume_times`` of ``message_delay_level``.

:class:`BrokerTimings` holds those figures (the broker's defaults, restated here: the framework
imports nothing of the broker) and a safety margin; :func:`minimum_retention` turns them into the
shortest retention allowed and :func:`purge` refuses a shorter one with
:class:`RetentionTooShortError` before touching the database.

Each batch deletes at most ``batch_size`` of the oldest rows (by the ``created_at`` index) in its
own transaction, so no lock is held long and other writers -- SQLite's single writer above all --
get in between batches.  ``DELETE ... WHERE key IN (SELECT key ... ORDER BY created_at LIMIT n)``
runs on SQLite and PostgreSQL alike (neither takes ``DELETE ... LIMIT`` portably).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

from sqlalchemy import Delete, Engine, Select, Table, delete, func, select, tuple_

from framework.errors import ConfigurationError
from framework.tables import inbox, local_transaction_log
from halfmq_wire.delays import DEFAULT_DELAY_LEVELS as DEFAULT_DELAY_LEVELS
from halfmq_wire.delays import RETRY_FIRST_LEVEL as RETRY_FIRST_LEVEL

if TYPE_CHECKING:  # SQLAlchemy's asyncio needs greenlet: imported only where it is used
    from sqlalchemy.ext.asyncio import AsyncEngine

TableName = Literal["log", "inbox"]
TABLES: dict[str, Table] = {"log": local_transaction_log, "inbox": inbox}

# The broker's other defaults (broker_service/settings.py) are restated below, as the framework
# imports nothing of the broker (tests/integration/framework/test_cleanup.py compares them);
# the retry schedule is the wire contract's, the broker's own default too.
DAY = 86_400.0

BATCH_SIZE = 1000
PAUSE_SECONDS = 0.01

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}


def parse_duration(text: str, *, unit_required: bool = False) -> float:
    """``7d``, ``36h``, ``90m``, ``45s``, ``500ms`` (a bare number: seconds) as seconds."""
    match = _DURATION.match(text.lower())
    if match is None or (unit_required and match[2] is None):
        raise ValueError(f"{text!r} is not a duration such as 7d, 36h, 90m, 45s or 500ms")
    return float(match[1]) * _UNIT_SECONDS[match[2] or "s"]


def format_duration(seconds: float) -> str:
    """``17620`` -> ``4h 53m 40s`` (whole seconds, rounded up: a minimum shown is one that passes)."""
    if 0 < seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    left = math.ceil(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"


def delay_levels(spec: str) -> tuple[float, ...]:
    """RocketMQ's ``messageDelayLevel`` (``"1s 5s 10s ..."``) as seconds, as the broker reads it."""
    levels = tuple(parse_duration(item, unit_required=True) for item in spec.split())
    if not levels:
        raise ValueError("message_delay_level needs at least one level")
    return levels


@dataclass(frozen=True, slots=True)
class BrokerTimings:
    """How long the broker may still need a row: its settings (and the clients' own) that bound
    check-backs and redeliveries, with the broker's defaults, plus a safety margin.

    * ``check_immunity_seconds``: how long a half waits before its first check -- the broker's
      ``transaction_timeout_seconds`` (6), or the longest ``check_immunity_seconds`` your
      producers give, if longer.
    * ``transaction_check_interval_seconds`` (30), ``transaction_check_max`` (15),
      ``check_timeout_seconds`` (3: how long a push check waits for its answer): the broker's.
    * ``message_delay_level`` (``1s 5s ... 1h 2h``) and ``max_reconsume_times`` (16): the broker's,
      or the group's own ``max_reconsume_times`` if larger.
    * ``invisible_seconds`` (30): the consumers' ``invisible_seconds`` (the longest, if several).
    * ``margin_seconds`` (one day): added on top.  The windows above hold while the groups run:
      a check that finds no live producer is not counted and waits, and a redelivery waits for a
      member to receive, so an outage of a group lengthens them by its own length.  The margin also
      covers clocks that differ between hosts (``created_at`` is the writer's clock), long
      transactions (``created_at`` is taken when they begin), a check round or the delay
      scheduler running late.  A day: an outage at night, noticed and fixed the next morning.
    """

    check_immunity_seconds: float = 6.0
    transaction_check_interval_seconds: float = 30.0
    transaction_check_max: int = 15
    check_timeout_seconds: float = 3.0
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times: int = 16
    invisible_seconds: float = 30.0
    margin_seconds: float = DAY

    def __post_init__(self) -> None:
        delay_levels(self.message_delay_level)
        for name in ("check_immunity_seconds", "check_timeout_seconds", "margin_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"BrokerTimings.{name} must be 0 or more")
        for name in ("transaction_check_interval_seconds", "invisible_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BrokerTimings.{name} must be more than 0")
        if self.transaction_check_max < 1:
            raise ValueError("BrokerTimings.transaction_check_max must be at least 1")
        if self.max_reconsume_times < 0:
            raise ValueError("BrokerTimings.max_reconsume_times must be 0 or more")


@dataclass(frozen=True, slots=True)
class Window:
    """How long the broker may need a row of ``table`` after its ``created_at``, how that is
    computed (``how``, with the figures), and the margin on top."""

    table: str
    seconds: float
    how: str
    margin_seconds: float
    fields: tuple[str, ...]  # the BrokerTimings fields it depends on

    @property
    def minimum_seconds(self) -> float:
        return self.seconds + self.margin_seconds


def check_window(timings: BrokerTimings) -> Window:
    """The latest a check of a transaction can come: its first round after the immunity, then one
    counted check an interval, ``transaction_check_max`` of them, each answered within the push
    time-out."""
    t = timings
    seconds = (
        t.check_immunity_seconds
        + t.transaction_check_max * t.transaction_check_interval_seconds
        + t.check_timeout_seconds
    )
    how = (
        f"the broker may check a transaction until {format_duration(t.check_immunity_seconds)} "
        f"(check_immunity_seconds) + {t.transaction_check_max} checks (transaction_check_max) x "
        f"{format_duration(t.transaction_check_interval_seconds)} "
        f"(transaction_check_interval_seconds) + {format_duration(t.check_timeout_seconds)} to "
        f"answer (check_timeout_seconds) = {format_duration(seconds)} after it began"
    )
    fields = (
        "check_immunity_seconds",
        "transaction_check_interval_seconds",
        "transaction_check_max",
        "check_timeout_seconds",
    )
    return Window(local_transaction_log.name, seconds, how, t.margin_seconds, fields)


def redelivery_window(timings: BrokerTimings) -> Window:
    """The latest a handled message can be delivered again: each of ``max_reconsume_times``
    redeliveries comes at most an invisibility (its ack was lost) plus its retry delay (it was
    nacked) after the one before; past them the message goes to the dead-letter queue."""
    t = timings
    levels = delay_levels(t.message_delay_level)
    used = [min(RETRY_FIRST_LEVEL + k, len(levels)) for k in range(t.max_reconsume_times)]
    delays = sum(levels[level - 1] for level in used)
    seconds = t.max_reconsume_times * t.invisible_seconds + delays
    span = f"levels {used[0]}-{used[-1]}" if used else "none"
    how = (
        f"a handled message may be delivered again until {t.max_reconsume_times} redeliveries "
        f"(max_reconsume_times) x {format_duration(t.invisible_seconds)} (invisible_seconds) + "
        f"their retry delays ({span} of message_delay_level: {format_duration(delays)}) = "
        f"{format_duration(seconds)} after its row was written"
    )
    fields = ("max_reconsume_times", "invisible_seconds", "message_delay_level")
    return Window(inbox.name, seconds, how, t.margin_seconds, fields)


def minimum_retention(table: TableName, timings: BrokerTimings | None = None) -> Window:
    """The window of ``table`` (``"log"`` or ``"inbox"``) under ``timings`` (the defaults)."""
    timings = timings or BrokerTimings()
    if _table(table) is local_transaction_log:
        return check_window(timings)
    return redelivery_window(timings)


# The purge command's flags for the BrokerTimings fields (named as the broker's settings).
FLAGS = {
    "check_immunity_seconds": "--check-immunity-seconds",
    "transaction_check_interval_seconds": "--transaction-check-interval-seconds",
    "transaction_check_max": "--transaction-check-max",
    "check_timeout_seconds": "--check-timeout-seconds",
    "message_delay_level": "--message-delay-level",
    "max_reconsume_times": "--max-reconsume-times",
    "invisible_seconds": "--invisible-seconds",
    "margin_seconds": "--margin",
}


class RetentionTooShortError(ConfigurationError, ValueError):
    """A retention shorter than the window in which the broker may still need the rows: deleting
    them could answer a check ROLLBACK for a committed transaction (log) or run a handler twice
    (inbox).  ``window`` says how long and why; ``keep_seconds`` is what was asked."""

    def __init__(self, window: Window, keep_seconds: float) -> None:
        self.window = window
        self.keep_seconds = keep_seconds
        given = ", ".join(f"{name}=..." for name in (*window.fields, "margin_seconds"))
        flags = ", ".join(FLAGS[name] for name in (*window.fields, "margin_seconds"))
        super().__init__(
            f"keeping {format_duration(keep_seconds)} of {window.table} is too short: "
            f"{window.how}; with a safety margin of {format_duration(window.margin_seconds)} "
            f"(margin_seconds) keep at least {format_duration(window.minimum_seconds)}. "
            f"Keep longer, or state your broker's and clients' timings if they differ: "
            f"BrokerTimings({given}) in code, {flags} on `halfmq framework purge`"
        )


def check_retention(
    table: TableName, keep: timedelta | float, timings: BrokerTimings | None = None
) -> Window:
    """The window of ``table``; raises :class:`RetentionTooShortError` when ``keep`` (a
    ``timedelta`` or seconds) is shorter than it plus the margin."""
    window = minimum_retention(table, timings)
    keep_seconds = _seconds(keep)
    if keep_seconds < window.minimum_seconds:
        raise RetentionTooShortError(window, keep_seconds)
    return window


@dataclass(frozen=True, slots=True)
class Purged:
    """What one purge did: ``rows`` deleted (a dry run: that would be deleted) from ``table``,
    all older than ``cutoff_ms`` (epoch ms), in ``batches`` transactions (the last one deleted
    fewer than the batch size, maybe none; a dry run: 0)."""

    table: str
    rows: int
    batches: int
    cutoff_ms: int
    dry_run: bool


class PurgeOptions(TypedDict, total=False):
    """A purge's keyword arguments, every one optional: ``timings`` (the broker's, which set the
    shortest retention; default ``None``: the defaults of :class:`BrokerTimings`), ``batch_size``
    (default :data:`BATCH_SIZE`), ``pause_seconds`` (default :data:`PAUSE_SECONDS`) and
    ``dry_run`` (default ``False``)."""

    timings: BrokerTimings | None
    batch_size: int
    pause_seconds: float
    dry_run: bool


def purge(
    engine: Engine, table: TableName, keep: timedelta | float, **options: Unpack[PurgeOptions]
) -> Purged:
    """Delete the rows of ``table`` (``"log"``: the local-transaction log, ``"inbox"``) whose
    ``created_at`` is older than ``keep`` (a ``timedelta`` or seconds), ``batch_size`` a
    transaction, ``pause_seconds`` apart; ``dry_run`` only counts them (:class:`PurgeOptions`).

    Raises :class:`RetentionTooShortError` (a ``ValueError`` and a ``ConfigurationError``) before
    touching the database when ``keep`` is shorter than :func:`minimum_retention` under
    ``timings``, and SQLAlchemy's errors as they come (the batches before stay deleted).

    With an ``AsyncEngine`` use :func:`purge_async`, or run this in a thread on a sync engine of
    the same database (an async engine's ``sync_engine`` works only inside its greenlet bridge).
    """
    plan = _Plan.make(table, keep, **options)
    if plan.dry_run:
        with engine.connect() as conn:
            return plan.result(conn.execute(plan.count()).scalar_one(), 0)
    statement, rows, batches = plan.delete(), 0, 0
    while True:
        with engine.begin() as conn:  # one short transaction a batch
            deleted = conn.execute(statement).rowcount
        rows, batches = rows + deleted, batches + 1
        if deleted < plan.batch_size:
            return plan.result(rows, batches)
        time.sleep(plan.pause_seconds)


async def purge_async(
    engine: AsyncEngine, table: TableName, keep: timedelta | float, **options: Unpack[PurgeOptions]
) -> Purged:
    """:func:`purge` on an ``AsyncEngine`` (``sqlite+aiosqlite``, ``postgresql+psycopg``...)."""
    plan = _Plan.make(table, keep, **options)
    if plan.dry_run:
        async with engine.connect() as conn:
            return plan.result((await conn.execute(plan.count())).scalar_one(), 0)
    statement, rows, batches = plan.delete(), 0, 0
    while True:
        async with engine.begin() as conn:
            deleted = (await conn.execute(statement)).rowcount
        rows, batches = rows + deleted, batches + 1
        if deleted < plan.batch_size:
            return plan.result(rows, batches)
        await asyncio.sleep(plan.pause_seconds)


def purge_transaction_log(
    engine: Engine, keep: timedelta | float, **options: Unpack[PurgeOptions]
) -> Purged:
    """:func:`purge` of ``halfmq_local_transaction_log``."""
    return purge(engine, "log", keep, **options)


def purge_inbox(engine: Engine, keep: timedelta | float, **options: Unpack[PurgeOptions]) -> Purged:
    """:func:`purge` of ``halfmq_inbox``."""
    return purge(engine, "inbox", keep, **options)


@dataclass(frozen=True, slots=True)
class _Plan:
    """One purge: the table, the cutoff (fixed when the purge starts), its statements, and the
    options it goes by (the defaults of :class:`PurgeOptions` are these)."""

    table: Table
    cutoff_ms: int
    batch_size: int
    pause_seconds: float
    dry_run: bool

    @classmethod
    def make(
        cls,
        name: TableName,
        keep: timedelta | float,
        timings: BrokerTimings | None = None,
        batch_size: int = BATCH_SIZE,
        pause_seconds: float = PAUSE_SECONDS,
        dry_run: bool = False,
    ) -> _Plan:
        table = _table(name)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if pause_seconds < 0:
            raise ValueError("pause_seconds must be 0 or more")
        check_retention(name, keep, timings)
        cutoff_ms = int((time.time() - _seconds(keep)) * 1000)
        return cls(table, cutoff_ms, batch_size, pause_seconds, dry_run)

    def count(self) -> Select[int]:
        old = self.table.c.created_at < self.cutoff_ms
        return select(func.count()).select_from(self.table).where(old)

    def delete(self) -> Delete:
        """One batch: the oldest ``batch_size`` rows before the cutoff (found by the
        ``created_at`` index), deleted by primary key."""
        key = list(self.table.primary_key.columns)
        oldest = (
            select(*key)
            .where(self.table.c.created_at < self.cutoff_ms)
            .order_by(self.table.c.created_at)
            .limit(self.batch_size)
        )
        target = key[0] if len(key) == 1 else tuple_(*key)
        return delete(self.table).where(target.in_(oldest))

    def result(self, rows: int, batches: int) -> Purged:
        return Purged(self.table.name, int(rows), batches, self.cutoff_ms, self.dry_run)


def _table(name: str) -> Table:
    table = TABLES.get(name)
    if table is None:
        raise ValueError(f"no framework table {name!r}: 'log' or 'inbox'")
    return table


def _seconds(keep: timedelta | float) -> float:
    seconds = keep.total_seconds() if isinstance(keep, timedelta) else float(keep)
    if seconds <= 0:
        raise ValueError(f"a retention must be more than 0 (got {seconds:g} s)")
    return seconds
