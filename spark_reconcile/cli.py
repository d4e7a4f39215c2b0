"""``halfmq reconcile`` and ``halfmq export``: plain Typer command functions the ``halfmq`` app
mounts, and ``main()`` for ``spark-submit`` / ``python -m spark_reconcile``.

Importable without pyspark or pyarrow: both are imported inside the commands, and their absence is
reported with the extra to install.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from spark_reconcile.config import (
    DEFAULT_LEDGER,
    KeyMapping,
    LedgerSource,
    ReconcileConfig,
    Thresholds,
)

INSTALL_HINT = 'pip install -e ".[spark]"  (or: pip install "halfmq[spark]")'
NOT_RUN = 2  # the job could not run: alert like a critical finding
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

err = Console(stderr=True)
out = Console()


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``1h``, ``2d`` (a bare number is seconds) -> milliseconds."""
    match = DURATION.match(text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 15m, 1h or 2d")
    return int(float(match[1]) * UNIT_MS[match[2] or "s"])


def parse_as_of(text: str | None) -> int | None:
    """Epoch ms, or an ISO date-time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def ledger_sources(pairs: list[str], config_file: Path | None) -> tuple[LedgerSource, ...]:
    """``--ledger NAME=URL`` with the default ``transfers`` mapping, plus the entries of a YAML
    file: a list of mappings with ``name``, ``url`` and any LedgerSource field."""
    sources = []
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url:
            raise typer.BadParameter(f"--ledger wants NAME=URL, got {pair!r}")
        sources.append(DEFAULT_LEDGER.with_url(name, url))
    if config_file is not None:
        entries: Any = yaml.safe_load(config_file.read_text())
        if not isinstance(entries, list):
            raise typer.BadParameter(f"{config_file}: expected a list of ledgers")
        sources += [LedgerSource(**entry) for entry in entries]
    return tuple(sources)


def spark_settings(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    """``--conf KEY=VALUE`` pairs, in the order given (a later one wins)."""
    settings = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--conf wants KEY=VALUE, got {pair!r}")
        settings.append((key.strip(), value))
    return tuple(settings)


def _store_url(database_url: str | None) -> str:
    if database_url:
        return database_url
    from broker_service.settings import BrokerSettings

    return BrokerSettings().database_url


DateOption = Annotated[str, typer.Option("--date", help="The day, YYYY-MM-DD (UTC)")]
UrlOption = Annotated[
    str | None,
    typer.Option(help="The broker's store, SQLAlchemy or jdbc: URL (default: HALFMQ_DATABASE_URL)"),
]
LedgerConfigOption = Annotated[
    Path | None, typer.Option(help="YAML list of ledgers with their own table/columns")
]


def reconcile(
    date: DateOption,
    out_dir: Annotated[Path, typer.Option("--out", help="Output root")] = Path("reconcile-out"),
    database_url: UrlOption = None,
    parquet: Annotated[
        str | None, typer.Option(help="Read a `halfmq export` root instead of the store")
    ] = None,
    ledger: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=URL of a bank's database with a `transfers` table, or "
            "NAME=parquet:PATH of its `halfmq export --ledger` copy (repeat)"
        ),
    ] = None,
    ledger_config: LedgerConfigOption = None,
    key_index: Annotated[int, typer.Option(help="Which message key is the business id")] = 0,
    key_pattern: Annotated[
        str | None, typer.Option(help="Regex picking the business id among the keys")
    ] = None,
    stuck_after: Annotated[str, typer.Option(help="Half without op older than this")] = "1h",
    lag_after: Annotated[str, typer.Option(help="Committed, not acked after this")] = "1h",
    credit_after: Annotated[str, typer.Option(help="Debit without credit after this")] = "1h",
    look_back: Annotated[
        str, typer.Option(help="Read resolutions up to this long after the day")
    ] = "24h",
    as_of: Annotated[
        str | None, typer.Option(help="Judge ages at this time (default: now)")
    ] = None,
    master: Annotated[
        str | None, typer.Option(help="Spark master: spark://HOST:7077, ... (default local[*])")
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            envvar="SPARK_REMOTE",
            help="A Spark Connect server, sc://HOST:15002, runs the job (instead of --master)",
        ),
    ] = None,
    conf: Annotated[
        list[str] | None,
        typer.Option("--conf", help="KEY=VALUE Spark setting, as spark-submit's (repeat)"),
    ] = None,
    jars: Annotated[list[str] | None, typer.Option(help="Extra JDBC driver jars")] = None,
    jdbc_partitions: Annotated[int, typer.Option(help="Parallel reads per big table")] = 8,
    jdbc_fetch_size: Annotated[
        int, typer.Option(help="Rows per round trip of each JDBC read (its memory)")
    ] = 10_000,
    shuffle_partitions: Annotated[int, typer.Option(help="spark.sql.shuffle.partitions")] = 16,
    driver_memory: Annotated[
        str,
        typer.Option(help="spark.driver.memory when this process runs the driver (not --remote)"),
    ] = "4g",
    console_url: Annotated[
        str | None,
        typer.Option(
            envvar="HALFMQ_CONSOLE_URL",
            help="The broker's base URL: the HTML report links each transaction to its console "
            "page (default: no links)",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: each kind's allowed age and thresholds (warn_above, "
            "critical_above, critical_after) the exit code follows (default: the fixed rule)"
        ),
    ] = None,
) -> None:
    """Reconcile one day: halves, ops, deliveries and ledgers.  Exit 0 clean, 1 warnings,
    2 critical (or the job could not run)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        err.print(f"[red]halfmq reconcile needs pyspark:[/red] {escape(INSTALL_HINT)}")
        raise typer.Exit(NOT_RUN) from None
    from spark_reconcile.anomalies import SEVERITY
    from spark_reconcile.jdbc import MissingDriverError
    from spark_reconcile.job import run, session_for
    from spark_reconcile.policy import load_policy
    from spark_reconcile.report import totals_line
    from spark_reconcile.session import UnreachableServerError, release

    try:
        config = ReconcileConfig(
            day=dt.date.fromisoformat(date),
            out=str(out_dir),
            store_url=None if parquet else _store_url(database_url),
            parquet=parquet,
            ledgers=ledger_sources(ledger or [], ledger_config),
            key_mapping=KeyMapping(index=key_index, pattern=key_pattern),
            thresholds=Thresholds(
                stuck_ms=parse_duration(stuck_after),
                ack_lag_ms=parse_duration(lag_after),
                credit_lag_ms=parse_duration(credit_after),
            ),
            look_back_ms=parse_duration(look_back),
            as_of=parse_as_of(as_of),
            master=master or "",
            remote=remote or "",
            spark_conf=spark_settings(conf or []),
            jdbc_partitions=jdbc_partitions,
            jdbc_fetch_size=jdbc_fetch_size,
            shuffle_partitions=shuffle_partitions,
            jars=tuple(jars or ()),
            console_url=console_url,
            policy=load_policy(policy, SEVERITY) if policy is not None else None,
        )
        spark = session_for(config, driver_memory)
    except (MissingDriverError, UnreachableServerError, ValueError) as exc:
        err.print(f"[red]cannot reconcile:[/red] {escape(str(exc))}")
        raise typer.Exit(NOT_RUN) from exc
    try:
        summary = run(config, spark)
    except Exception as exc:  # the boundary: any failure must not read as "warnings" (1)
        err.print(f"[red]reconciliation failed:[/red] {escape(str(exc))}")
        raise typer.Exit(NOT_RUN) from exc
    finally:
        release(spark)
    out.print(
        f"{config.day}: [bold]{summary.status}[/bold] ({totals_line(summary)}); "
        f"report in {out_dir / 'report'}"
    )
    raise typer.Exit(summary.exit_code)


def export(
    date: DateOption,
    out_dir: Annotated[Path, typer.Option("--out", help="Export root")] = Path("halfmq-export"),
    database_url: UrlOption = None,
    ledger: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=URL of a bank's database: its `transfers` rows of the day go to "
            "OUT/ledgers/NAME, read by `reconcile --ledger NAME=parquet:OUT/ledgers/NAME` (repeat)"
        ),
    ] = None,
    ledger_config: LedgerConfigOption = None,
    chunk_rows: Annotated[int, typer.Option(help="Rows fetched per round trip")] = 50_000,
    buckets: Annotated[
        int,
        typer.Option(
            min=0,
            help="Write the messages and transactions in N files bucketed by transaction id "
            "(Spark's bucketing), so reconcile builds its view without a shuffle (0: one file)",
        ),
    ] = 0,
) -> None:
    """Export one day of the store (and of the banks' ledgers) as Parquet for
    `halfmq reconcile --parquet`."""
    try:
        from spark_reconcile.export import export_day, export_ledger
    except ImportError as exc:
        err.print(
            f"[red]halfmq export needs pyarrow:[/red] {escape(INSTALL_HINT)} ({escape(str(exc))})"
        )
        raise typer.Exit(NOT_RUN) from exc
    import sqlalchemy as sa
    from rich.progress import Progress

    day = dt.date.fromisoformat(date)
    sources = ledger_sources(ledger or [], ledger_config)
    if any(source.parquet_path is not None for source in sources):
        raise typer.BadParameter("a ledger to export is a database URL, not parquet:")
    engine = sa.create_engine(_store_url(database_url))
    ledger_rows: dict[str, int] = {}
    try:
        with Progress(console=err) as progress:
            done = export_day(
                engine, out_dir, day, chunk_rows=chunk_rows, progress=progress, buckets=buckets
            )
            for source in sources:
                bank = sa.create_engine(source.url)
                try:
                    ledger_rows[source.name] = export_ledger(
                        bank, source, out_dir, day, chunk_rows=chunk_rows, progress=progress
                    )
                finally:
                    bank.dispose()
    except sa.exc.SQLAlchemyError as exc:
        err.print(f"[red]cannot export:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    finally:
        engine.dispose()
    rows = ", ".join(f"{name} {n}" for name, n in done.rows.items())
    rows += "".join(f", ledger {name} {n}" for name, n in ledger_rows.items())
    mark = "advanced" if done.watermark_advanced else "left as it was"
    if done.watermark is not None:  # today's export stops short of the day's end: say where
        at = dt.datetime.fromtimestamp(done.watermark / 1000, dt.UTC)
        mark += f" at {at.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
    out.print(f"exported {date} to {out_dir}: {rows}; watermark {mark}")


def main() -> None:
    """Entry point of ``spark-submit spark_reconcile/__main__.py`` and ``python -m``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(reconcile)
    app()
