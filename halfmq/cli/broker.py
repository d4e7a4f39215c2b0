"""``halfmq broker serve``: run a broker."""

from __future__ import annotations

import inspect
import logging
import ssl
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console

from broker_service import logs
from broker_service.api import hardening
from broker_service.settings import BrokerSettings, load_settings

app = typer.Typer(help="Run the broker.", no_args_is_help=True)
err = Console(stderr=True)
log = logging.getLogger("halfmq.broker")

# Shorter spellings of some settings' flags (the long one works too).
_ALIASES = {"acl_file": "--acl"}


def build_settings(config: Path | None, overrides: dict[str, Any]) -> BrokerSettings:
    """Environment < config file < flags; a bad value exits 2 with pydantic's message."""
    try:
        return load_settings(config, overrides)
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"[red]invalid settings:[/red] {logs.redact(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc


def _setting_options() -> list[inspect.Parameter]:
    """One ``--<name>`` flag per broker setting, made from the settings model itself, so a new
    setting is a flag without anyone remembering to add it."""
    parameters = []
    for name, field in BrokerSettings.model_fields.items():
        annotation = field.annotation
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if annotation is bool else [flag]
        if name in _ALIASES:
            decls.append(_ALIASES[name])
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
    # A list setting's flag (--allowed-hosts) not given is an empty list: not given.
    given = {name: value for name, value in flags.items() if value not in ((), [])}
    run(build_settings(config, given))


serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.signature(serve).parameters["config"], *_setting_options()]
)
app.command()(serve)


def run(settings: BrokerSettings) -> None:
    from broker_service.api.protocol import bounded_protocol
    from broker_service.app import build_app

    _check_tls(settings)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logs.quiet_http_client()
    config = uvicorn.Config(
        build_app(settings, server_gc=True),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
        # httptools, with a request head bounded while it is read (it buffers any header whole)
        http=bounded_protocol(settings.max_header_bytes),
    )
    logs.install_redaction()  # on uvicorn's handlers too: they exist once its Config is made
    warning = hardening.exposure_warning(settings)
    if warning is not None:
        log.warning(warning)
    server = uvicorn.Server(config)
    server.run()
    if not server.started:
        raise typer.Exit(3)  # uvicorn's exit status for a start-up failure (it logged why)


def _check_tls(settings: BrokerSettings) -> None:
    """A certificate and key that do not load are one clear line, not a traceback at start."""
    if settings.ssl_certfile is None or settings.ssl_keyfile is None:
        return
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    except (ssl.SSLError, OSError) as exc:
        err.print(
            f"[red]invalid settings:[/red] ssl_certfile {settings.ssl_certfile} with ssl_keyfile "
            f"{settings.ssl_keyfile} do not load: {exc}",
            highlight=False,
        )
        raise typer.Exit(2) from exc
