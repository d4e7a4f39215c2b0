"""``halfmq framework purge``: delete old rows of the framework's tables in a service's database.

For cron: the local-transaction log and the inbox (:mod:`framework.tables`) grow by a row per local
transaction and per consumed message.  The purge (:func:`framework.cleanup.purge`) refuses a
retention shorter than the window in which the broker may still need the rows -- before it
connects, for every table asked, so a refused run deletes nothing.  The database URL is printed
with its password masked, in answers and in errors alike; give it in
``HALFMQ_FRAMEWORK_DATABASE_URL`` to keep it out of the crontab and ``ps``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from broker_service.logs import redact, safe_url
from framework.cleanup import (
    BATCH_SIZE,
    TABLES,
    BrokerTimings,
    Purged,
    RetentionTooShortError,
    TableName,
    Window,
    check_retention,
    delay_levels,
    format_duration,
    parse_duration,
    purge,
)
from halfmq.cli.output import table

app = typer.Typer(
    help="The framework's tables (local-transaction log, inbox) in your service's database.",
    no_args_is_help=True,
)

DATABASE_URL_ENV = "HALFMQ_FRAMEWORK_DATABASE_URL"
_DEFAULT = BrokerTimings()

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the outcome as JSON (for scripts).")
]


class Which(StrEnum):
    LOG = "log"
    INBOX = "inbox"
    ALL = "all"


_NAMES: dict[Which, list[TableName]] = {
    Which.LOG: ["log"],
    Which.INBOX: ["inbox"],
    Which.ALL: ["log", "inbox"],
}


def _checked_by(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An option's callback: the value as given (the command converts it) when ``parse`` takes
    it, else a usage error saying what ``parse`` refused."""

    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        return value

    return check


_duration = _checked_by(parse_duration)  # 7d, 36h, 90m, 45s, 500ms
_levels = _checked_by(delay_levels)


def _seconds_help(what: str, default: float) -> str:
    return f"{what} (default: {default:g}, the broker's)."


@dataclass(frozen=True, slots=True)
class _Job:
    """One table to purge and the window its retention was checked against."""

    name: TableName
    window: Window


@app.command("purge")
def purge_(
    database_url: Annotated[
        str,
        typer.Option(
            "--database-url",
            envvar=DATABASE_URL_ENV,
            help="SQLAlchemy URL of the service's database (the one holding the framework's "
            f"tables, not the broker's store); or set {DATABASE_URL_ENV}.",
            show_default=False,
        ),
    ],
    keep: Annotated[
        str,
        typer.Option(
            callback=_duration,
            help="Keep rows younger than this: 7d, 36h, 90m (refused if shorter than the window "
            "in which the broker may still need them).",
        ),
    ] = "7d",
    which: Annotated[Which, typer.Option("--table", help="Which table to purge.")] = Which.ALL,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count the rows that would go; delete nothing.")
    ] = False,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Rows deleted per transaction.")
    ] = BATCH_SIZE,
    pause: Annotated[
        str, typer.Option(callback=_duration, help="Pause between batches (other writers get in).")
    ] = "10ms",
    check_immunity_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds before a half's first check: the broker's transaction_timeout_seconds "
            "(default 6), or your producers' longest check_immunity_seconds.",
        ),
    ] = _DEFAULT.check_immunity_seconds,
    transaction_check_interval_seconds: Annotated[
        float,
        typer.Option(min=0.001, help=_seconds_help("The broker's check interval", 30)),
    ] = _DEFAULT.transaction_check_interval_seconds,
    transaction_check_max: Annotated[
        int, typer.Option(min=1, help="Counted checks before a half is discarded (default 15).")
    ] = _DEFAULT.transaction_check_max,
    check_timeout_seconds: Annotated[
        float, typer.Option(min=0, help=_seconds_help("How long a push check waits", 3))
    ] = _DEFAULT.check_timeout_seconds,
    message_delay_level: Annotated[
        str,
        typer.Option(callback=_levels, help="The broker's retry delay levels."),
    ] = _DEFAULT.message_delay_level,
    max_reconsume_times: Annotated[
        int,
        typer.Option(
            min=0, help="Redeliveries before the dead-letter queue: the broker's (16) or a group's."
        ),
    ] = _DEFAULT.max_reconsume_times,
    invisible_seconds: Annotated[
        float,
        typer.Option(min=0.001, help="The consumers' invisible_seconds (default 30; the longest)."),
    ] = _DEFAULT.invisible_seconds,
    margin: Annotated[
        str,
        typer.Option(
            callback=_duration,
            help="Safety margin on top of the window (group outages, clocks): docs/framework.md.",
        ),
    ] = "1d",
    as_json: JsonOption = False,
) -> None:
    """Delete rows older than --keep from the local-transaction log and the inbox (for cron).

    A --keep shorter than the broker's check or redelivery window plus --margin is refused: exit 1.
    """
    timings = BrokerTimings(
        check_immunity_seconds=check_immunity_seconds,
        transaction_check_interval_seconds=transaction_check_interval_seconds,
        transaction_check_max=transaction_check_max,
        check_timeout_seconds=check_timeout_seconds,
        message_delay_level=message_delay_level,
        max_reconsume_times=max_reconsume_times,
        invisible_seconds=invisible_seconds,
        margin_seconds=parse_duration(margin),
    )
    keep_seconds, pause_seconds = parse_duration(keep), parse_duration(pause)
    jobs = [_Job(name, _checked(name, keep_seconds, timings, as_json)) for name in _NAMES[which]]
    shown_url = safe_url(database_url)
    engine = _engine(database_url, shown_url, as_json)
    try:
        jobs, skipped = _present(engine, jobs, which, shown_url, as_json)
        done: list[tuple[_Job, Purged]] = []
        for job in jobs:
            try:
                purged = purge(
                    engine,
                    job.name,
                    keep_seconds,
                    timings=timings,
                    batch_size=batch_size,
                    pause_seconds=pause_seconds,
                    dry_run=dry_run,
                )
            except SQLAlchemyError as exc:
                name = TABLES[job.name].name
                done_before = " (the batches before it stay deleted)" if not dry_run else ""
                message = f"cannot purge {name} in {shown_url}: {_reason(exc)}{done_before}"
                _fail("DATABASE_ERROR", message, as_json)
            done.append((job, purged))
    finally:
        engine.dispose()
    _report(shown_url, dry_run, keep_seconds, done, skipped, as_json)


def _checked(name: TableName, keep_seconds: float, timings: BrokerTimings, as_json: bool) -> Window:
    try:
        return check_retention(name, keep_seconds, timings)
    except RetentionTooShortError as exc:
        message = f"{exc.message} (nothing was deleted)"
        _fail("RETENTION_TOO_SHORT", message, as_json, _window_detail(exc.window))


def _engine(url: str, shown_url: str, as_json: bool) -> Engine:
    """An engine for ``url``; a SQLite file that does not exist is an error (not a new file)."""
    try:
        missing = _missing_sqlite_file(make_url(url))
        if missing is not None:
            _fail("DATABASE_NOT_FOUND", f"no SQLite database at {missing}", as_json)
        return create_engine(url)
    except ImportError as exc:  # a dialect whose driver is not installed (mysql:// -> MySQLdb)
        why = f"its driver is not installed ({_reason(exc)})"
        _fail("BAD_DATABASE_URL", f"cannot use {shown_url}: {why}", as_json)
    except (ArgumentError, SQLAlchemyError, ValueError) as exc:
        _fail("BAD_DATABASE_URL", f"cannot use {shown_url}: {_reason(exc)}", as_json)


def _missing_sqlite_file(url: URL) -> str | None:
    """The path of a SQLite file URL whose file does not exist (connecting would create it)."""
    path = url.database or ""
    if url.get_backend_name() != "sqlite" or path in ("", ":memory:") or path.startswith("file:"):
        return None
    return None if Path(path).is_file() else path


def _present(
    engine: Engine, jobs: list[_Job], which: Which, shown_url: str, as_json: bool
) -> tuple[list[_Job], list[str]]:
    """The jobs whose table exists; a missing table is an error when asked for by name."""
    try:
        inspector = inspect(engine)
        missing = [job for job in jobs if not inspector.has_table(TABLES[job.name].name)]
    except SQLAlchemyError as exc:
        _fail("DATABASE_ERROR", f"cannot read {shown_url}: {_reason(exc)}", as_json)
    if missing and (which is not Which.ALL or len(missing) == len(jobs)):
        names = " and ".join(TABLES[job.name].name for job in missing)
        _fail(
            "TABLE_NOT_FOUND",
            f"{shown_url} has no {names}: is it the service's database, with the framework's "
            "tables created (framework.tables)?",
            as_json,
        )
    present = [job for job in jobs if job not in missing]
    return present, [TABLES[job.name].name for job in missing]


def _reason(exc: BaseException) -> str:
    """The driver's own message (not SQLAlchemy's SQL and link), passwords masked."""
    cause = getattr(exc, "orig", None) or exc
    return redact(str(cause).strip() or type(cause).__name__)


def _window_detail(window: Window) -> dict[str, Any]:
    return {
        "table": window.table,
        "window_seconds": window.seconds,
        "margin_seconds": window.margin_seconds,
        "minimum_seconds": window.minimum_seconds,
    }


def _fail(code: str, message: str, as_json: bool, detail: dict[str, Any] | None = None) -> NoReturn:
    """One red line on stderr (``--json``: the broker's error shape) and exit code 1."""
    if as_json:
        envelope = {"error": {"code": code, "message": message, "detail": detail or {}}}
        typer.echo(json.dumps(envelope, indent=2), err=True)
    else:
        line = Text("error: ", style="bold red")
        line.append(message)
        Console(stderr=True, highlight=False).print(line, soft_wrap=True)
    raise typer.Exit(1)


def _report(
    shown_url: str,
    dry_run: bool,
    keep_seconds: float,
    done: list[tuple[_Job, Purged]],
    skipped: list[str],
    as_json: bool,
) -> None:
    if as_json:
        answer = {
            "database": shown_url,
            "dry_run": dry_run,
            "keep_seconds": keep_seconds,
            "tables": [
                {
                    "table": purged.table,
                    "rows": purged.rows,
                    "batches": purged.batches,
                    "cutoff_ms": purged.cutoff_ms,
                    "cutoff": _moment(purged.cutoff_ms),
                    **_window_detail(job.window),
                }
                for job, purged in done
            ],
            "skipped": skipped,
        }
        typer.echo(json.dumps(answer, indent=2))
        return
    console = Console(highlight=False)
    console.print(Text(f"{'dry run on' if dry_run else 'purged'} {shown_url}"), soft_wrap=True)
    title = f"rows older than {format_duration(keep_seconds)}"
    rows = [
        (
            purged.table,
            purged.rows,
            purged.batches,
            _moment(purged.cutoff_ms),
            format_duration(job.window.minimum_seconds),
        )
        for job, purged in done
    ]
    counted = "would delete" if dry_run else "deleted"
    columns = ["table", counted, "batches", "created before", "shortest retention"]
    console.print(table(title, columns, rows, count=False))
    for name in skipped:
        console.print(Text(f"{name}: not in this database, skipped", style="dim"))


def _moment(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds")
