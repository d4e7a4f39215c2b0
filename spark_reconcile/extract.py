"""The extract: the broker's store and the banks' ledgers (over JDBC, or their Parquet export)
read into the frames ``anomalies`` expects, with the run's window pushed down into the databases'
queries and big tables read in partitions."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import uuid
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_reconcile import buckets as bucketing
from spark_reconcile.anomalies import DLQ_PREFIX, SCHEDULE_TOPIC
from spark_reconcile.config import DAY_MS, LedgerSource, Window
from spark_reconcile.jdbc import JdbcTarget, to_jdbc

TX_STATES = ("PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED")
FETCH_SIZE = 10_000  # rows per round trip of each JDBC read (--jdbc-fetch-size)

TRANSACTION_COLUMNS = {
    "transaction_id": "string",
    "msg_id": "string",
    "producer_group": "string",
    "topic": "string",
    "state": "string",
    "check_times": "int",
    "created_at": "long",
    "resolved_at": "long",
    "discarded_at": "long",
}
MESSAGE_COLUMNS = {
    "id": "long",
    "topic": "string",
    "msg_id": "string",
    "tags": "string",
    "keys": "string",
    "properties": "string",
    "transaction_id": "string",
    "origin_id": "long",
    "stored_at": "long",
}
SUBSCRIPTION_COLUMNS = {
    "consumer_group": "string",
    "topic": "string",
    "expression": "string",
    "created_at": "long",
}
ACK_COLUMNS = {"consumer_group": "string", "msg_id": "string"}
# What the job reads of the export's tables, typed as ``halfmq export`` writes them (a test
# compares them with its Arrow schema): given to the reader, Spark runs no job to infer them.
EXPORT_READ = {
    "transactions": TRANSACTION_COLUMNS,
    "messages": MESSAGE_COLUMNS,
    "deliveries": {**ACK_COLUMNS, "state": "string", "delivered_at": "long"},
    "subscriptions": SUBSCRIPTION_COLUMNS,
}


@dataclasses.dataclass(frozen=True)
class StoreFrames:
    transactions: DataFrame
    messages: DataFrame
    dlq: DataFrame
    scheduled: DataFrame
    subscriptions: DataFrame
    acks: DataFrame
    tables: tuple[str, ...] = ()  # catalog tables made to read a bucketed export (drop_tables)


def _typed(df: DataFrame, columns: dict[str, str]) -> DataFrame:
    return df.select(*(F.col(name).cast(kind).alias(name) for name, kind in columns.items()))


def _quoted(columns: Sequence[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


# --- JDBC ------------------------------------------------------------------------------------


class JdbcReader:
    """Spark's JDBC reader bound to one database."""

    def __init__(
        self, spark: SparkSession, target: JdbcTarget, partitions: int, fetch_size: int = FETCH_SIZE
    ) -> None:
        self.spark = spark
        self.target = target
        self.partitions = partitions
        self.fetch_size = fetch_size

    def _options(self) -> dict[str, str]:
        return {
            "url": self.target.url,
            "driver": self.target.driver.java_class,
            "fetchsize": str(self.fetch_size),
            **self.target.properties,
        }

    def query(self, sql: str) -> DataFrame:
        return self.spark.read.format("jdbc").options(**self._options(), query=sql).load()

    def bounds(self, table: str, column: str, where: str = "1 = 1") -> tuple[int, int] | None:
        """The span of a positive id column, None when no row matches.  The empty case comes
        back as -1, not NULL: Debian's sqlite-jdbc (3.40) fails Spark's read of a NULL
        aggregate ("column -1 out of bounds")."""
        row = self.query(
            f'SELECT coalesce(min("{column}"), -1) AS lo, coalesce(max("{column}"), -1) AS hi '
            f"FROM {table} WHERE {where}"
        ).first()
        if row is None or row["lo"] is None or int(row["lo"]) < 0:
            return None
        return int(row["lo"]), int(row["hi"])

    def partitioned(self, sql: str, column: str, bounds: tuple[int, int] | None) -> DataFrame:
        """``sql`` read in ``partitions`` ranges of the numeric ``column`` (which it selects)."""
        if bounds is None:
            return self.query(sql)
        lo, hi = bounds
        return (
            self.spark.read.format("jdbc")
            .options(
                **self._options(),
                dbtable=f"({sql}) AS q",
                partitionColumn=column,
                lowerBound=str(lo),
                upperBound=str(hi + 1),
                numPartitions=str(max(1, min(self.partitions, hi - lo + 1))),
            )
            .load()
        )

    def by_predicates(self, sql: str, predicates: list[str]) -> DataFrame:
        return self.spark.read.jdbc(
            self.target.url,
            f"({sql}) AS q",
            predicates=predicates,
            properties=self._options(),
        )


def store_from_jdbc(
    spark: SparkSession,
    store_url: str,
    window: Window,
    partitions: int,
    fetch_size: int = FETCH_SIZE,
) -> StoreFrames:
    reader = JdbcReader(spark, to_jdbc(store_url), partitions, fetch_size)
    return StoreFrames(
        transactions=_typed(_jdbc_transactions(reader, window), TRANSACTION_COLUMNS),
        messages=_typed(_jdbc_messages(reader, window), MESSAGE_COLUMNS),
        dlq=_typed(_jdbc_dlq(reader, window), MESSAGE_COLUMNS),
        scheduled=_typed(_jdbc_scheduled(reader, window), MESSAGE_COLUMNS),
        subscriptions=_typed(
            reader.query(f"SELECT {_quoted(list(SUBSCRIPTION_COLUMNS))} FROM subscriptions"),
            SUBSCRIPTION_COLUMNS,
        ),
        acks=_typed(_jdbc_acks(reader, window), ACK_COLUMNS),
    )


def _jdbc_transactions(reader: JdbcReader, window: Window) -> DataFrame:
    """Partitioned by state and slices of the day, so each part is a range of the
    ``(state, created_at)`` index."""
    sql = (
        f"SELECT {_quoted(list(TRANSACTION_COLUMNS))} FROM transactions "
        f"WHERE created_at >= {window.start} AND created_at < {window.end}"
    )
    slices = max(1, reader.partitions // 2)
    step = -(-(window.end - window.start) // slices)
    edges = [window.start + i * step for i in range(slices)] + [window.end]
    predicates = [
        f"state = '{state}' AND created_at >= {lo} AND created_at < {hi}"
        for state in TX_STATES
        for lo, hi in itertools.pairwise(edges)
    ]
    others = ", ".join(f"'{s}'" for s in TX_STATES)
    predicates.append(f"state NOT IN ({others})")
    return reader.by_predicates(sql, predicates)


def _stored_in(window: Window, condition: str) -> str:
    """The messages stored in the span the job reads that meet ``condition``, as a WHERE."""
    return f"stored_at >= {window.read_from} AND stored_at < {window.horizon} AND {condition}"


def _messages_where(where: str) -> str:
    return f"SELECT {_quoted(list(MESSAGE_COLUMNS))} FROM messages WHERE {where}"


def _jdbc_messages(reader: JdbcReader, window: Window) -> DataFrame:
    where = _stored_in(window, "transaction_id IS NOT NULL")
    return reader.partitioned(_messages_where(where), "id", reader.bounds("messages", "id", where))


def _jdbc_dlq(reader: JdbcReader, window: Window) -> DataFrame:
    dead = f"substr(topic, 1, {len(DLQ_PREFIX)}) = '{DLQ_PREFIX}'"
    return reader.query(_messages_where(_stored_in(window, dead)))


def _jdbc_scheduled(reader: JdbcReader, window: Window) -> DataFrame:
    """Delayed transactional messages still parked (a range of the ``(topic, deliver_at)``
    index)."""
    parked = f"topic = '{SCHEDULE_TOPIC}' AND transaction_id IS NOT NULL"
    return reader.query(_messages_where(_stored_in(window, parked)))


def _jdbc_acks(reader: JdbcReader, window: Window) -> DataFrame:
    """Partitioned by id ranges (the primary key) over the whole table's id span."""
    sql = (
        'SELECT "id", "consumer_group", "msg_id" FROM deliveries '
        f"WHERE state = 'ACKED' AND delivered_at >= {window.read_from} "
        f"AND delivered_at < {window.horizon}"
    )
    return reader.partitioned(sql, "id", reader.bounds("deliveries", "id"))


# --- Parquet export ----------------------------------------------------------------------------


def _dates(start: int, end: int) -> tuple[dt.date, dt.date]:
    first = dt.datetime.fromtimestamp(max(start, 0) / 1000, dt.UTC).date()
    last = dt.datetime.fromtimestamp((end - 1) / 1000, dt.UTC).date()
    return first, last


def export_schema(table: str) -> str:
    """The columns the job reads of an exported table and its ``date`` partition, as DDL."""
    columns = [f"{name} {kind}" for name, kind in EXPORT_READ[table].items()]
    return ", ".join([*columns, "date date"])


def _export_table(
    spark: SparkSession, root: str, table: str, start: int, end: int, tables: list[str]
) -> DataFrame:
    """The date partitions of an exported table that overlap ``[start, end)``: read as a
    bucketed catalog table when every one of them was exported bucketed (its name added to
    ``tables``), else as plain Parquet files."""
    first, last = _dates(start, end)
    path = f"{root.rstrip('/')}/{table}"
    buckets = _bucketed(path, first, last) if table in bucketing.BUCKETED else None
    if buckets is not None:
        tables.append(_bucketed_table(spark, path, table, buckets, first, last))
        df = spark.table(tables[-1])
    else:
        df = spark.read.schema(export_schema(table)).parquet(path)
    return df.where(F.col("date").between(F.lit(first), F.lit(last)))


def _days(path: str, first: dt.date, last: dt.date) -> list[Path]:
    """The day partitions of ``path`` (a local or mounted folder) from ``first`` to ``last``."""
    days = (first + dt.timedelta(days=i) for i in range((last - first).days + 1))
    return [d for d in (Path(path) / f"date={day.isoformat()}" for day in days) if d.is_dir()]


def _bucketed(path: str, first: dt.date, last: dt.date) -> int | None:
    """The number of buckets every existing day partition was written in, None when one is
    not bucketed (or they differ, or none exists, or the path is not a local folder)."""
    if "://" in path:
        return None
    found = {bucketing.read_marker(day) for day in _days(path, first, last)}
    return found.pop() if len(found) == 1 and None not in found else None


def _bucketed_table(
    spark: SparkSession, path: str, table: str, buckets: int, first: dt.date, last: dt.date
) -> str:
    """A catalog table over the export's ``table`` declared bucketed as it was written
    (``CLUSTERED BY (transaction_id) INTO N BUCKETS``), with the days read as its partitions:
    Spark then scans each bucket in one task and plans no exchange by transaction id.  The
    table is external (dropping it leaves the files) and named for this run only.  Locations
    are plain paths: a file URI would escape the ``=`` of ``date=D``."""
    name = f"halfmq_export_{table}_{uuid.uuid4().hex[:12]}"
    location = _quoted_path(Path(path))
    spark.sql(
        f"CREATE TABLE {name} ({export_schema(table)}) USING parquet PARTITIONED BY (date) "
        f"CLUSTERED BY ({bucketing.COLUMN}) INTO {buckets} BUCKETS LOCATION '{location}'"
    )
    for day in _days(path, first, last):
        value = day.name.removeprefix("date=")
        spark.sql(
            f"ALTER TABLE {name} ADD PARTITION (date='{value}') LOCATION '{_quoted_path(day)}'"
        )
    return name


def _quoted_path(path: Path) -> str:
    """``path`` made absolute, for a quoted SQL string."""
    return str(path.resolve()).replace("\\", "\\\\").replace("'", "\\'")


def drop_tables(spark: SparkSession, names: Sequence[str]) -> None:
    """Drops the catalog tables a run made to read a bucketed export (not their files)."""
    for name in names:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def store_from_parquet(spark: SparkSession, root: str, window: Window) -> StoreFrames:
    """Reads ``halfmq export`` output: ``<root>/<table>/date=YYYY-MM-DD/*.parquet`` (the
    transactions and the messages as bucketed tables where they were exported so)."""
    tables: list[str] = []
    tx = _export_table(spark, root, "transactions", window.start, window.end, tables).where(
        (F.col("created_at") >= window.start) & (F.col("created_at") < window.end)
    )
    messages = _export_table(
        spark, root, "messages", window.read_from, window.horizon, tables
    ).where((F.col("stored_at") >= window.read_from) & (F.col("stored_at") < window.horizon))
    deliveries = _export_table(
        spark, root, "deliveries", window.read_from, window.horizon, tables
    ).where(
        (F.col("state") == "ACKED")
        & (F.col("delivered_at") >= window.read_from)
        & (F.col("delivered_at") < window.horizon)
    )
    subs = (
        _export_table(spark, root, "subscriptions", 0, window.horizon + DAY_MS, tables)
        .groupBy("consumer_group", "topic")
        .agg(
            F.max_by("expression", "date").alias("expression"),
            F.min("created_at").alias("created_at"),
        )
    )
    return StoreFrames(
        transactions=_typed(tx, TRANSACTION_COLUMNS),
        messages=_typed(messages.where(F.col("transaction_id").isNotNull()), MESSAGE_COLUMNS),
        dlq=_typed(messages.where(F.col("topic").startswith(DLQ_PREFIX)), MESSAGE_COLUMNS),
        scheduled=_typed(
            messages.where(
                (F.col("topic") == SCHEDULE_TOPIC) & F.col("transaction_id").isNotNull()
            ),
            MESSAGE_COLUMNS,
        ),
        subscriptions=_typed(subs, SUBSCRIPTION_COLUMNS),
        acks=_typed(deliveries, ACK_COLUMNS),
        tables=tuple(tables),
    )


def exported_statuses(spark: SparkSession, root: str) -> DataFrame:
    """The operators' statuses of the breaks, from the export's newest snapshot
    (``<root>/reconcile_break_statuses/date=D``, written by ``halfmq export``)."""
    path = f"{root.rstrip('/')}/reconcile_break_statuses"
    df = spark.read.parquet(path)
    newest = df.agg(F.max("date")).first()
    return df.where(F.col("date") == F.lit(newest[0] if newest else None)).select(
        "break_id", "status", "note", "actor", "updated_at"
    )


# --- ledgers -----------------------------------------------------------------------------------


def read_ledger(
    spark: SparkSession,
    source: LedgerSource,
    window: Window,
    partitions: int,
    fetch_size: int = FETCH_SIZE,
) -> DataFrame:
    """One bank's ledger rows of the window as bank, business_id, account_id, amount (>= 0),
    direction (DEBIT | CREDIT), created_at."""
    if source.parquet_path is not None:
        raw = _exported_ledger(spark, source, source.parquet_path, window)
    else:
        reader = JdbcReader(spark, to_jdbc(source.url), partitions, fetch_size)
        raw = _jdbc_ledger(reader, source, window)
    amount = F.col("amount").cast("long")
    if source.direction_column:
        side = F.when(F.col("direction") == source.debit_value, "DEBIT").when(
            F.col("direction") == source.credit_value, "CREDIT"
        )
    else:
        side = F.when(amount < 0, "DEBIT").otherwise("CREDIT")
    return raw.select(
        F.lit(source.name).alias("bank"),
        F.col("business_id").cast("string"),
        F.col("account_id").cast("string"),
        F.abs(amount).alias("amount"),
        side.alias("direction"),
        F.col("created_at").cast("long"),
    )


def _jdbc_ledger(reader: JdbcReader, source: LedgerSource, window: Window) -> DataFrame:
    created = f'"{source.created_at_column}"'
    direction = f'"{source.direction_column}"' if source.direction_column else "NULL"
    sql = (
        f'SELECT "{source.business_id_column}" AS business_id, '
        f'"{source.account_column}" AS account_id, "{source.amount_column}" AS amount, '
        f'{direction} AS direction, {created} AS created_at FROM "{source.table}" '
        f"WHERE {created} >= {window.read_from} AND {created} < {window.horizon}"
    )
    return reader.partitioned(sql, "created_at", (window.read_from, window.horizon))


def _exported_ledger(
    spark: SparkSession, source: LedgerSource, root: str, window: Window
) -> DataFrame:
    """``halfmq export --ledger`` output (``<root>/date=YYYY-MM-DD/*.parquet``, the table's own
    column names): the date partitions overlapping the window, then the window's rows."""
    first, last = _dates(window.read_from, window.horizon)
    df = spark.read.parquet(root).where(F.col("date").between(F.lit(first), F.lit(last)))
    created = F.col(source.created_at_column)
    direction = F.col(source.direction_column) if source.direction_column else F.lit(None)
    return df.where((created >= window.read_from) & (created < window.horizon)).select(
        F.col(source.business_id_column).alias("business_id"),
        F.col(source.account_column).alias("account_id"),
        F.col(source.amount_column).alias("amount"),
        direction.alias("direction"),
        created.alias("created_at"),
    )


def read_ledgers(
    spark: SparkSession,
    sources: Sequence[LedgerSource],
    window: Window,
    partitions: int,
    fetch_size: int = FETCH_SIZE,
) -> DataFrame | None:
    frames = [read_ledger(spark, s, window, partitions, fetch_size) for s in sources]
    if not frames:
        return None
    ledger = frames[0]
    for frame in frames[1:]:
        ledger = ledger.unionByName(frame)
    return ledger
