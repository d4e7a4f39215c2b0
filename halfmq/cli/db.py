"""``halfmq db upgrade``: bring a store's schema to the current migrations."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from broker_service.settings import BrokerSettings, check_database_url
from broker_service.store import migrate
from halfmq.cli.output import refuse

app = typer.Typer(help="The store's schema (Alembic migrations).", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

UrlOption = Annotated[
    str | None,
    typer.Option(help="SQLAlchemy URL (default: HALFMQ_DATABASE_URL, else ./halfmq.db)"),
]


def _url(database_url: str | None) -> str:
    """The URL given, else the broker's setting; one the broker could not open is one line and
    exit 2 (the same rules as ``broker serve``: SQLite or PostgreSQL, a SQLite file's directory
    exists), as is a ``HALFMQ_...`` variable the settings refuse."""
    try:
        url = database_url or BrokerSettings().database_url
    except ValidationError as exc:
        from halfmq.cli.broker import settings_errors

        refuse("invalid settings", settings_errors(exc))
    try:
        return check_database_url(url)
    except ValueError as exc:
        refuse("invalid --database-url", str(exc))


@app.command()
def upgrade(
    database_url: UrlOption = None,
    revision: Annotated[
        str, typer.Option(help="The Alembic revision to upgrade to (head: the newest).")
    ] = "head",
) -> None:
    """Apply the migrations up to REVISION (default: the newest)."""
    url = _url(database_url)
    try:
        migrate.upgrade(url, revision)
        status = _status(url)
    except SQLAlchemyError as exc:
        err.print(f"[red]cannot upgrade the store:[/red] {exc}")
        raise typer.Exit(1) from exc
    out.print(f"schema at [bold]{status.current}[/bold] (head {status.head})")


@app.command()
def current(database_url: UrlOption = None) -> None:
    """Show the store's schema revision and whether it is current."""
    url = _url(database_url)
    try:
        status = _status(url)
    except SQLAlchemyError as exc:
        err.print(f"[red]cannot read the store:[/red] {exc}")
        raise typer.Exit(1) from exc
    state = "current" if status.is_current else "OUT OF DATE: run `halfmq db upgrade`"
    out.print(f"schema at {status.current or 'nothing'}, head {status.head}: {state}")
    if not status.is_current:
        raise typer.Exit(1)


def _status(url: str) -> migrate.SchemaStatus:
    engine = create_engine(url)
    try:
        return migrate.schema_status(engine)
    finally:
        engine.dispose()
