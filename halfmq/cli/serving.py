"""Running a broker: ``halfmq broker serve`` once its settings are valid (:mod:`halfmq.cli.broker`
makes them from the flags).  Everything a user can get wrong is one line and an exit status
before the store is touched: a TLS pair that does not load, an ACL file that does not parse
(exit 2), a port that cannot be bound (exit 3)."""

from __future__ import annotations

import errno
import logging
import socket
import ssl
from importlib import metadata
from typing import TYPE_CHECKING

import typer
import uvicorn
from rich.console import Console

from broker_service import logs
from broker_service.api import hardening
from broker_service.settings import BrokerSettings
from halfmq.cli.output import refuse

if TYPE_CHECKING:
    from broker_service.store.sql_store import SqlStore

err = Console(stderr=True)
log = logging.getLogger("halfmq.broker")


def run(settings: BrokerSettings) -> None:
    """Bind the port first (a busy one is one line, before the store is touched), then build the
    broker and serve on that socket; "ready" is logged once it listens (:class:`BrokerServer`)."""
    from broker_service.api.protocol import bounded_protocol
    from broker_service.app import build_app

    _check_tls(settings)
    _check_acl(settings)
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


def _check_acl(settings: BrokerSettings) -> None:
    """An ACL file that does not parse is one line (its path, line and reason) before anything
    starts, not a traceback from the broker's composition."""
    if settings.acl_file is None:
        return
    from broker_service.acl.errors import AclFileError
    from broker_service.acl.file import load_acl

    try:
        load_acl(settings.acl_file)
    except AclFileError as exc:
        refuse("invalid ACL file", str(exc))
