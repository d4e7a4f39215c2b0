"""``halfmq broker serve``: run a broker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console

from broker_service.settings import BrokerSettings, Flush, load_settings

app = typer.Typer(help="Run the broker.", no_args_is_help=True)
err = Console(stderr=True)


def build_settings(config: Path | None, overrides: dict[str, Any]) -> BrokerSettings:
    """Environment < config file < flags; a bad value exits 2 with pydantic's message."""
    try:
        return load_settings(config, overrides)
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option(help="Settings file (.yaml, .toml or .json)", exists=True)
    ] = None,
    database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL of the store")] = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    broker_id: Annotated[str | None, typer.Option()] = None,
    auto_create_topics: Annotated[bool | None, typer.Option()] = None,
    default_topic_queues: Annotated[int | None, typer.Option()] = None,
    max_message_bytes: Annotated[int | None, typer.Option()] = None,
    flush: Annotated[Flush | None, typer.Option(help="sync (SYNC_FLUSH) or async")] = None,
    retention_hours: Annotated[float | None, typer.Option()] = None,
    transaction_timeout_seconds: Annotated[float | None, typer.Option()] = None,
    transaction_check_interval_seconds: Annotated[float | None, typer.Option()] = None,
    transaction_check_max: Annotated[int | None, typer.Option()] = None,
    producer_expiry_seconds: Annotated[float | None, typer.Option()] = None,
    message_delay_level: Annotated[str | None, typer.Option()] = None,
    max_reconsume_times: Annotated[int | None, typer.Option()] = None,
    scheduler: Annotated[
        bool | None, typer.Option("--scheduler/--no-scheduler", help="Run schedulers here")
    ] = None,
    write_batch_max: Annotated[int | None, typer.Option()] = None,
    pool_size: Annotated[int | None, typer.Option()] = None,
    log_level: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Start the broker (default 127.0.0.1:9876 on the SQLite file ./halfmq.db)."""
    overrides = {k: v for k, v in locals().items() if k != "config"}
    settings = build_settings(config, overrides)
    run(settings)


def run(settings: BrokerSettings) -> None:
    from broker_service.api.app import create_app

    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
    )
