"""Value objects that configure one reconciliation run; no I/O, no pyspark."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from spark_reconcile.policy import Policy

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
PARQUET_SCHEME = "parquet:"


def day_start_ms(day: dt.date) -> int:
    """Epoch milliseconds of ``day`` 00:00 UTC."""
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return int(midnight.timestamp() * 1000)


def now_ms() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)


@dataclasses.dataclass(frozen=True)
class Window:
    """What one run looks at, in epoch ms.

    Transactions created in ``[start, end)`` are judged; events (op records, real messages, acks,
    ledger rows) are read up to ``horizon`` = ``end`` + the look-back, so a transaction created at
    23:59 and resolved at 00:10 is seen as resolved; ages are measured at ``as_of``.
    """

    start: int
    end: int
    horizon: int
    as_of: int

    @classmethod
    def for_day(
        cls, day: dt.date, *, look_back_ms: int = DAY_MS, as_of: int | None = None
    ) -> Window:
        start = day_start_ms(day)
        end = start + DAY_MS
        horizon = end + look_back_ms
        seen_at = min(now_ms(), horizon) if as_of is None else as_of
        return cls(start=start, end=end, horizon=min(horizon, max(seen_at, end)), as_of=seen_at)

    @property
    def read_from(self) -> int:
        """Events are read from here: one day before ``start`` catches a debit written just
        before its half was stored, and the counterpart of an early ledger row."""
        return self.start - DAY_MS


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """How old something must be before its absence is an anomaly (ms)."""

    stuck_ms: int = HOUR_MS
    ack_lag_ms: int = HOUR_MS
    credit_lag_ms: int = HOUR_MS


@dataclasses.dataclass(frozen=True)
class KeyMapping:
    """From a message's keys (JSON array) to the ledger's business id.

    The key at ``index`` (0: the first) is taken; with ``pattern``, the first key matching the
    regular expression is taken instead, reduced to its first group when it has one.
    """

    index: int = 0
    pattern: str | None = None


@dataclasses.dataclass(frozen=True)
class LedgerSource:
    """One bank's ledger table and how its columns map onto (business id, account, amount,
    direction, created time).  ``direction_column`` None means the sign of ``amount`` says it
    (negative: debit).  ``url`` is the bank's database (read over JDBC), or ``parquet:PATH``,
    the folder ``halfmq export --ledger`` wrote (read without JDBC, same column names)."""

    name: str
    url: str
    table: str = "transfers"
    business_id_column: str = "transfer_id"
    account_column: str = "account_id"
    amount_column: str = "amount"
    direction_column: str | None = "direction"
    debit_value: str = "DEBIT"
    credit_value: str = "CREDIT"
    created_at_column: str = "created_at"

    def with_url(self, name: str, url: str) -> LedgerSource:
        return dataclasses.replace(self, name=name, url=url)

    @property
    def parquet_path(self) -> str | None:
        """The exported folder when ``url`` is ``parquet:PATH``, else ``None`` (a database)."""
        return (
            self.url.removeprefix(PARQUET_SCHEME) if self.url.startswith(PARQUET_SCHEME) else None
        )


DEFAULT_LEDGER = LedgerSource(name="", url="")


@dataclasses.dataclass(frozen=True)
class ReconcileConfig:
    """Everything one run needs: a store URL (SQLAlchemy or ``jdbc:``) or a Parquet export."""

    day: dt.date
    out: str
    store_url: str | None = None
    parquet: str | None = None
    ledgers: tuple[LedgerSource, ...] = ()
    key_mapping: KeyMapping = KeyMapping()
    thresholds: Thresholds = Thresholds()
    look_back_ms: int = DAY_MS
    as_of: int | None = None
    master: str = ""  # "" : local[*], or what spark-submit chose
    remote: str = ""  # sc://HOST:PORT: a Spark Connect server runs the job ("" : none)
    spark_conf: tuple[tuple[str, str], ...] = ()  # --conf KEY=VALUE, over the job's own settings
    jdbc_partitions: int = 8
    jdbc_fetch_size: int = 10_000  # rows per round trip of each JDBC read
    shuffle_partitions: int = 16
    jars: tuple[str, ...] = ()
    console_url: str | None = None  # the broker's base URL: the report links transactions there
    policy: Policy | None = None  # --policy: allowed ages and thresholds (None: the fixed rule)

    def __post_init__(self) -> None:
        if (self.store_url is None) == (self.parquet is None):
            raise ValueError("give exactly one input: a store URL or a Parquet export")
        if self.master and self.remote:
            raise ValueError("give a Spark master or a Spark Connect server (--remote), not both")
        if self.remote and not self.remote.startswith("sc://"):
            raise ValueError(f"a Spark Connect server is sc://HOST:PORT, got {self.remote!r}")
        if self.console_url is not None:
            check_console_url(self.console_url)

    @property
    def window(self) -> Window:
        return Window.for_day(self.day, look_back_ms=self.look_back_ms, as_of=self.as_of)


def check_console_url(url: str) -> None:
    """The base URL the report's links start with (``{url}/console/transactions/{id}``): an
    http(s) URL with a host and without credentials -- the report is mailed and shared, so it
    must carry no secret."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the console URL must be http(s)://host[:port], got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the console URL must not carry a user or password: the report is shared")
    if parts.query or parts.fragment:
        raise ValueError(f"the console URL must be the broker's base URL, got {url!r}")
