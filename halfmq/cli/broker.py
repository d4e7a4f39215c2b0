"""``halfmq broker serve``: run a broker; ``halfmq broker list``: the brokers sharing its store."""

from __future__ import annotations

import errno
import inspect
import logging
import socket
import ssl
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from rich.console import Console, RenderableType

from broker_service import logs
from broker_service.api import hardening
from broker_service.settings import BrokerSettings, load_settings
from halfmq.cli.client import Json, json_call
from halfmq.cli.output import (
    DEFAULT_BROKER,
    AccessKeyOption,
    BrokerOption,
    JsonOption,
    SecretKeyOption,
    TimeoutOption,
    connect,
    credentials,
    show,
    table,
)

if TYPE_CHECKING:
    from broker_service.store.sql_store import SqlStore

app = typer.Typer(help="Run the broker; list the brokers sharing its store.", no_args_is_help=True)
err = Console(stderr=True)
log = logging.getLogger("halfmq.broker")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="Settings file (.yaml, .toml or .json)  [default: none]",
        exists=True,
        show_default=False,
    ),
]

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
        # The flag's own default stays None ("not given": the file or environment decides); its
        # help shows the setting's
        option = typer.Option(*decls, help=_help(field), show_default=False)
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[annotation | None, option],  # type: ignore[operator]
            )
        )
    return parameters


def _help(field: FieldInfo) -> str:
    """The setting's description and its default, in click's ``[default: ...]`` form (a
    description that explains its default itself is left as it is)."""
    description = field.description or ""
    if "Default:" in description:
        return description
    value = field.get_default(call_default_factory=True)
    if value is None or value == []:
        shown = "none"
    elif value == "":
        shown = "empty"
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif isinstance(value, Enum):
        shown = str(value.value)
    else:
        shown = str(value)
    return f"{description}  [default: {shown}]"


def serve(
    config: ConfigOption = None,
    **flags: Any,
) -> None:
    """Start the broker (default 127.0.0.1:9876 on the SQLite file ./halfmq.db).

    Every setting is also HALFMQ_<NAME> in the environment and a key of the config file; a flag
    wins over the file, the file over the environment."""
    # A list setting's flag (--allowed-hosts) not given is an empty list: not given.
    given = {name: value for name, value in flags.items() if value not in ((), [])}
    run(build_settings(config, given))


# The signature Typer reads: its annotations are objects, not this module's postponed strings.
serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(
            "config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigOption
        ),
        *_setting_options(),
    ]
)

app.command()(serve)


def run(settings: BrokerSettings) -> None:
    """Bind the port first (a busy one is one line, before the store is touched), then build the
    broker and serve on that socket; "ready" is logged once it listens (:class:`BrokerServer`)."""
    from broker_service.api.protocol import bounded_protocol
    from broker_service.app import build_app

    _check_tls(settings)
    listener = _listen(settings)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logs.quiet_http_client()
    app = build_app(settings, server_gc=True)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
        # httptools, with a request head bounded while it is read (it buffers any header whole)
        http=bounded_protocol(settings.max_header_bytes),
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: a client on loopback could
        # then choose its own address. Only the proxies the operator names are believed.
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or [],
    )
    logs.install_redaction()  # on uvicorn's handlers too: they exist once its Config is made
    url = _url(settings, listener)
    log.info("%s", start_line(settings, url))
    warning = hardening.exposure_warning(settings)
    if warning is not None:
        log.warning(warning)
    server = BrokerServer(config, app.state.store, settings, url)
    server.run(sockets=[listener])
    if not server.started:
        raise typer.Exit(3)  # uvicorn's exit status for a start-up failure (it logged why)


def _listen(settings: BrokerSettings) -> socket.socket:
    """The broker's listening socket, bound as uvicorn binds one; a port that cannot be bound
    exits 3 with one line, before any database is created or migrated."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        why = "the address is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        err.print(
            f"[red]cannot listen on {settings.host}:{settings.port}:[/red] {why} "
            "(another broker? choose another --port)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(3) from exc
    return sock


def _url(settings: BrokerSettings, listener: socket.socket) -> str:
    scheme = "https" if settings.ssl_certfile else "http"
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"{scheme}://{host}:{listener.getsockname()[1]}"


def start_line(settings: BrokerSettings, url: str) -> str:
    """What an operator wants to know of a broker at its start, without a secret: version,
    address, store, ACL, retention and the check-back's settings."""
    store = settings.database_url.split(":", 1)[0].split("+", 1)[0]
    acl = "off" if settings.acl_file is None else f"on ({settings.acl_file})"
    hard = settings.retention_hard_limit_hours
    return (
        f"broker starting: halfmq {_version()} on {url}"
        f"{f' as {settings.broker_id}' if settings.broker_id else ''}; "
        f"{store} store {logs.safe_url(settings.database_url)} (flush {settings.flush.value}); "
        f"ACL {acl}; retention {settings.retention_hours:g} h, dead letters "
        f"{settings.dead_letter_retention_hours:g} h"
        f"{f', hard limit {hard:g} h' if hard is not None else ''}; "
        f"check-back {'on' if settings.scheduler else 'off (no scheduler)'}: a half older than "
        f"{settings.transaction_timeout_seconds:g} s is checked every "
        f"{settings.transaction_check_interval_seconds:g} s, discarded after "
        f"{settings.transaction_check_max} checks, push time-out {settings.check_timeout_seconds:g} s"
    )


def _version() -> str:
    try:
        return metadata.version("halfmq")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


class BrokerServer(uvicorn.Server):
    """uvicorn's server, which says "ready" once it listens: uvicorn runs the app's start-up (the
    store, the schedulers) before it serves, so the app itself cannot know."""

    def __init__(
        self, config: uvicorn.Config, store: SqlStore, settings: BrokerSettings, url: str
    ) -> None:
        super().__init__(config)
        self.store = store
        self.settings = settings
        self.url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        from broker_service.app import ready_line

        await super().startup(sockets=sockets)
        if not self.started:
            return
        line = ready_line(self.store, self.settings)
        if line is None:
            log.warning("listening on %s, not ready (the reason is above)", self.url)
        else:
            log.info("%s, listening on %s", line, self.url)


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


# -- halfmq broker list --------------------------------------------------------------------------


@app.command("list")
def list_brokers(
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 30.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """The brokers sharing the store of --broker (GET /v1/brokers, admin): the live ones first,
    the others with when they were last seen."""
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        answer = client.call(json_call("GET", "/v1/brokers"))
    show(answer, as_json, render_brokers)


def render_brokers(answer: Json) -> RenderableType:
    rows = [
        [
            b["broker_id"],
            b["address"],
            b["version"],
            b["store"],
            "live" if b["live"] else f"last seen {b['seen_seconds_ago']:.0f} s ago",
            b["started_at"],
        ]
        for b in answer["brokers"]
    ]
    columns = ["broker", "address", "version", "store", "seen", "started"]
    return table("brokers", columns, rows)
