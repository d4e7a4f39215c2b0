"""``halfmq broker serve``: run a broker."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console

from broker_service.settings import BrokerSettings, load_settings

app = typer.Typer(help="Run the broker.", no_args_is_help=True)
err = Console(stderr=True)


def build_settings(config: Path | None, overrides: dict[str, Any]) -> BrokerSettings:
    """Environment < config file < flags; a bad value exits 2 with pydantic's message."""
    try:
        return load_settings(config, overrides)
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from exc


def _setting_options() -> list[inspect.Parameter]:
    """One ``--<name>`` flag per broker setting, made from the settings model itself, so a new
    setting is a flag without anyone remembering to add it."""
    parameters = []
    for name, field in BrokerSettings.model_fields.items():
        annotation = field.annotation
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if annotation is bool else [flag]
        option = typer.Option(*decls, help=field.description or "", show_default=False)
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[annotation | None, option],  # type: ignore[operator]
            )
        )
    return parameters


def serve(
    config: Annotated[
        Path | None, typer.Option(help="Settings file (.yaml, .toml or .json)", exists=True)
    ] = None,
    **flags: Any,
) -> None:
    """Start the broker (default 127.0.0.1:9876 on the SQLite file ./halfmq.db).

    Every setting is also HALFMQ_<NAME> in the environment and a key of the config file; a flag
    wins over the file, the file over the environment."""
    run(build_settings(config, flags))


serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.signature(serve).parameters["config"], *_setting_options()]
)
app.command()(serve)


def run(settings: BrokerSettings) -> None:
    from broker_service.api.app import create_app

    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(
        create_app(settings, server_gc=True),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
    )
