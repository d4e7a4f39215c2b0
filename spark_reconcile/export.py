"""``halfmq export --date D``: the broker's store as the Parquet the reconciliation reads.

Layout: ``<out>/<table>/date=YYYY-MM-DD/part-00000.parquet``; ``messages`` by ``stored_at``,
``transactions`` by ``created_at``, ``deliveries`` by ``delivered_at`` (the day's rows), and
snapshots of ``subscriptions``, ``consumer_groups`` and the operators' statuses of the
reconciliation's breaks (``reconcile_break_statuses``) under the day.  Bodies are left out (the
reconciliation never reads them).  Rows are streamed from the store in chunks; a rerun replaces the
day's files.  The ``reconcile-export`` row of ``export_watermarks`` then advances, when the day
continues the days already exported, so retention may purge what is exported: to the end of the
day, or -- for today, or a day the export began before the end of -- to a minute before the
export began reading (``IN_FLIGHT_MS``), never into the future and never back.

A bank's ledger (``export_ledger``) goes to ``<out>/ledgers/<name>/date=YYYY-MM-DD/``: the rows
created that day, only the columns its ``LedgerSource`` maps, under their own names, so
``halfmq reconcile --ledger NAME=parquet:<out>/ledgers/<name>`` reads it with the same mapping and
without a JDBC driver.

Needs SQLAlchemy and pyarrow only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from rich.progress import Progress, TaskID

from broker_service.store import schema
from spark_reconcile import buckets as bucketing
from spark_reconcile.config import DAY_MS, LedgerSource, day_start_ms, now_ms

BY_DAY = {"messages": "stored_at", "transactions": "created_at", "deliveries": "delivered_at"}
SNAPSHOTS = ("subscriptions", "consumer_groups", "reconcile_break_statuses")
# A snapshot of a table that an older store has not got yet is skipped (migration 0010 adds the
# operators' statuses of the reconciliation's breaks).
OPTIONAL = frozenset({"reconcile_break_statuses"})
LEFT_OUT = {"messages": frozenset({"body"})}
WATERMARK = "reconcile-export"
PART = "part-00000.parquet"
# How far before the export's start its watermark stays: a row is given its stored_at before its
# write commits (a writer batch, a busy database), so one stored just before the read began may
# not be visible to it; brokers' clocks may differ a little from the exporter's, too.
IN_FLIGHT_MS = 60_000


@dataclasses.dataclass(frozen=True)
class Exported:
    day: dt.date
    rows: dict[str, int]
    files: tuple[Path, ...]
    watermark_advanced: bool
    watermark: int | None = None  # exported_until after the export (epoch ms)


def _arrow_type(column: sa.Column[Any]) -> pa.DataType:
    kind = column.type
    if isinstance(kind, sa.BigInteger):
        return pa.int64()
    if isinstance(kind, sa.Integer):
        return pa.int32()
    if isinstance(kind, sa.Boolean):
        return pa.bool_()
    if isinstance(kind, sa.LargeBinary):
        return pa.binary()
    return pa.string()


def exported_columns(table: sa.Table) -> list[sa.Column[Any]]:
    return [c for c in table.columns if c.name not in LEFT_OUT.get(table.name, frozenset())]


def arrow_schema(table: sa.Table) -> pa.Schema:
    return pa.schema([pa.field(c.name, _arrow_type(c)) for c in exported_columns(table)])


def _batches(
    conn: sa.Connection, query: sa.Select[Any], arrow: pa.Schema, chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(query)
    for rows in result.partitions(chunk_rows):
        columns = list(zip(*rows, strict=True))
        yield pa.RecordBatch.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, arrow, strict=True)],
            schema=arrow,
        )


def _write(
    conn: sa.Connection,
    query: sa.Select[Any],
    arrow: pa.Schema,
    target: Path,
    chunk_rows: int,
    progress: Progress | None,
    label: str,
) -> int:
    """Streams the rows of ``query`` into ``target``, atomically."""
    total = conn.execute(sa.select(sa.func.count()).select_from(query.subquery())).scalar_one()
    task: TaskID | None = None
    if progress is not None:
        task = progress.add_task(f"{label} {target.parent.name}", total=total)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    written = 0
    with pq.ParquetWriter(tmp, arrow) as writer:
        for batch in _batches(conn, query, arrow, chunk_rows):
            writer.write_batch(batch)
            written += batch.num_rows
            if progress is not None and task is not None:
                progress.advance(task, batch.num_rows)
    _replace(target.parent, {tmp: target})
    return written


def _replace(directory: Path, written: dict[Path, Path]) -> None:
    """The day's new files in place of its old ones (and of an old bucketing marker)."""
    for stale in [*directory.glob("*.parquet"), directory / bucketing.MARKER]:
        stale.unlink(missing_ok=True)
    for tmp, target in written.items():
        os.replace(tmp, target)


def _write_bucketed(
    conn: sa.Connection,
    query: sa.Select[Any],
    arrow: pa.Schema,
    directory: Path,
    buckets: int,
    chunk_rows: int,
) -> int:
    """Streams the rows of ``query`` into one file per bucket of their transaction id, named
    and hashed as Spark's bucketing expects (``spark_reconcile.buckets``), then the marker."""
    directory.mkdir(parents=True, exist_ok=True)
    writers: dict[int, pq.ParquetWriter] = {}
    written = 0
    try:
        for batch in _batches(conn, query, arrow, chunk_rows):
            for bucket, rows in bucketing.split(batch, buckets).items():
                if bucket not in writers:
                    tmp = directory / f".{bucketing.file_name(bucket)}.tmp"
                    writers[bucket] = pq.ParquetWriter(tmp, arrow)
                writers[bucket].write_batch(rows)
            written += batch.num_rows
    finally:
        for writer in writers.values():
            writer.close()
    names = {directory / f".{bucketing.file_name(b)}.tmp": bucketing.file_name(b) for b in writers}
    _replace(directory, {tmp: directory / name for tmp, name in names.items()})
    bucketing.write_marker(directory, buckets)
    return written


def watermark_for(day_end: int, began: int, in_flight_ms: int = IN_FLIGHT_MS) -> int:
    """How far an export of the day ending at ``day_end`` that began reading at ``began`` has
    read: the day's end, or -- the day not over when the read began -- ``in_flight_ms`` before
    the read began.  A row stored later than that may still come, so it is not exported yet."""
    return min(day_end, began - in_flight_ms)


def _advance_watermark(
    conn: sa.Connection, start: int, until: int, last_id: int | None
) -> tuple[bool, int | None]:
    """Moves ``reconcile-export`` on to ``until`` (``watermark_for``) when the day continues what
    was exported -- the mark is within the day or at its start -- or nothing was: retention must
    never purge an unexported row of a skipped day, nor one stored after the read began.  Never
    back.  Whether it moved, and the mark."""
    marks = schema.export_watermarks
    row = conn.execute(sa.select(marks).where(marks.c.name == WATERMARK)).one_or_none()
    now = now_ms()
    if row is None:
        conn.execute(
            marks.insert().values(
                name=WATERMARK, last_message_id=last_id or 0, exported_until=until, updated_at=now
            )
        )
        return True, until
    if row.exported_until < start or row.exported_until >= until:
        return False, int(row.exported_until)
    conn.execute(
        marks.update()
        .where(marks.c.name == WATERMARK)
        .values(
            last_message_id=max(row.last_message_id, last_id or 0),
            exported_until=until,
            updated_at=now,
        )
    )
    return True, until


def export_day(
    engine: sa.Engine,
    out: Path,
    day: dt.date,
    *,
    chunk_rows: int = 50_000,
    tables: Sequence[str] = (*BY_DAY, *SNAPSHOTS),
    progress: Progress | None = None,
    in_flight_ms: int = IN_FLIGHT_MS,
    buckets: int = 0,
) -> Exported:
    """``day``'s rows of the store as Parquet under ``out``, then the watermark moved on to what
    the export has read (``watermark_for``; ``in_flight_ms``: see ``IN_FLIGHT_MS``).  With
    ``buckets``, the messages and the transactions are written in that many files each, bucketed
    by transaction id as Spark's bucketing expects (the job then builds its view of the day
    without shuffling either)."""
    began = now_ms()  # before the first read: a row stored from here on is not in this export
    start = day_start_ms(day)
    end = start + DAY_MS
    until = watermark_for(end, began, in_flight_ms)
    rows: dict[str, int] = {}
    files: list[Path] = []
    with engine.connect() as conn:
        for name in tables:
            if name in OPTIONAL and not sa.inspect(conn).has_table(name):
                continue
            table = schema.metadata.tables[name]
            query = sa.select(*exported_columns(table))
            if name in BY_DAY:
                column = table.c[BY_DAY[name]]
                query = query.where((column >= start) & (column < end))
            target = out / name / f"date={day.isoformat()}" / PART
            arrow = arrow_schema(table)
            if buckets and name in bucketing.BUCKETED:
                rows[name] = _write_bucketed(conn, query, arrow, target.parent, buckets, chunk_rows)
                files.extend(sorted(target.parent.glob("*.parquet")))
                continue
            rows[name] = _write(conn, query, arrow, target, chunk_rows, progress, name)
            files.append(target)
        messages = schema.messages
        last_id = conn.execute(
            sa.select(sa.func.max(messages.c.id)).where(
                (messages.c.stored_at >= start) & (messages.c.stored_at < until)
            )
        ).scalar()
    with engine.begin() as conn:
        advanced, mark = _advance_watermark(conn, start, until, last_id)
    return Exported(
        day=day, rows=rows, files=tuple(files), watermark_advanced=advanced, watermark=mark
    )


def ledger_path(out: Path, name: str) -> Path:
    """Where ``export_ledger`` puts the ledger ``name``: the folder ``parquet:`` points at."""
    return out / "ledgers" / name


def export_ledger(
    engine: sa.Engine,
    source: LedgerSource,
    out: Path,
    day: dt.date,
    *,
    chunk_rows: int = 50_000,
    progress: Progress | None = None,
) -> int:
    """The rows of ``source``'s ledger created on ``day``: ids, account and direction as text,
    amount and created time as 64-bit integers (cents and epoch ms, as the job reads them)."""
    start = day_start_ms(day)
    texts = [source.business_id_column, source.account_column]
    if source.direction_column:
        texts.append(source.direction_column)
    numbers = [source.amount_column, source.created_at_column]
    table = sa.table(source.table, *(sa.column(name) for name in (*texts, *numbers)))
    created = table.c[source.created_at_column]
    columns: list[sa.ColumnElement[Any]] = [
        *(sa.cast(table.c[name], sa.String).label(name) for name in texts),
        *(sa.cast(table.c[name], sa.BigInteger).label(name) for name in numbers),
    ]
    query = sa.select(*columns).where((created >= start) & (created < start + DAY_MS))
    arrow = pa.schema(
        [pa.field(name, pa.string()) for name in texts]
        + [pa.field(name, pa.int64()) for name in numbers]
    )
    target = ledger_path(out, source.name) / f"date={day.isoformat()}" / PART
    with engine.connect() as conn:
        return _write(conn, query, arrow, target, chunk_rows, progress, f"ledger {source.name}")
