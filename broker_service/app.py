"""Composition: the one place that builds a broker from its settings.

:func:`compose` builds, in order, the store, the domain's services (every write through one
wrapper that wakes the long polls of the topics it appended to), the schedulers and the ACL
runtime; :func:`build_app` hands them to the HTTP app with the lifespan that opens the store and
runs the background work.  Nothing is built at import time.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from broker_service.acl.addresses import parse_address
from broker_service.acl.runtime import AclRuntime
from broker_service.api.app import Served, create_app
from broker_service.console.mount import mount_console
from broker_service.domain.audit.service import AuditService
from broker_service.domain.brokers.model import BrokerPresence
from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.clients.service import ClientService
from broker_service.domain.clock import now_ms
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.consumers.wakeup import Arrivals, ArrivalsStore
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.retention.service import RetentionService
from broker_service.domain.transactions.callbacks import CallbackPolicy
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.grpc.server import GrpcServer, Listen, check_listen
from broker_service.grpc.service import Served as GrpcServed
from broker_service.logs import redact, safe_url
from broker_service.metrics import BrokerMetrics
from broker_service.schedulers.acl_reload import AclReloadScheduler
from broker_service.schedulers.checkback import CheckBackScheduler
from broker_service.schedulers.delays import DelayScheduler
from broker_service.schedulers.presence import PresenceScheduler
from broker_service.schedulers.retention import RetentionScheduler, count_round
from broker_service.settings import BrokerSettings, reachable_address
from broker_service.store.sql_store import SqlStore

log = logging.getLogger("halfmq.broker")

# The young generation's threshold in a broker process (CPython's default: 700 allocations).
SERVER_GC_THRESHOLD = 20_000


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker's parts, built by :func:`compose`: what the HTTP routes serve (``served``: the
    domain's services, the metrics, the ACL runtime, the audit log), and what runs beside them."""

    settings: BrokerSettings
    store: SqlStore
    served: Served
    acl_reload: AclReloadScheduler | None  # None without the ACL
    beats: PresenceScheduler  # this broker's row among the brokers, renewed every beat
    delays: DelayScheduler
    checks: CheckBackScheduler | None  # None without ``scheduler``
    purges: RetentionScheduler | None  # None without ``scheduler``
    grpc: GrpcServer | None = None  # RocketMQ 5's gRPC port: None without ``grpc_port``

    async def start(self) -> None:
        """Open the store (a new SQLite file gets the schema), then the ACL and the schedulers.
        "Ready" is the server's to say, once it listens (:func:`ready_line`)."""
        store, settings = self.store, self.settings
        store.open()
        where = safe_url(settings.database_url)
        if not store.schema_current:
            reason = redact(store.schema_reason)
            log.warning(
                "broker started on %s (%s store), not ready: %s", where, store.dialect, reason
            )
        acl = self.served.acl
        if acl is not None:  # published now, or once the store is ready
            await acl.start()
        if self.acl_reload is not None:
            self.acl_reload.start()
        if self.grpc is not None:  # on the running loop: uvicorn's, in a broker process
            await self.grpc.start()
            # its bound port in this broker's row: QueryRoute answers every live broker's
            grpc_address = reachable_address(settings.host, self.grpc.port)
            presence = self.served.presence
            presence.me = replace(presence.me, grpc_address=grpc_address)
        self.beats.start()  # every broker, schedulers or not: it shares the store
        if settings.scheduler:
            self.delays.start()
        if self.checks is not None:
            self.checks.start()
        if self.purges is not None:
            self.purges.start()

    async def stop(self) -> None:
        if self.grpc is not None:
            await self.grpc.stop()
        await self.beats.stop()  # the row stays: "last seen N s ago" until a day has passed
        if self.purges is not None:
            await self.purges.stop()
        await self.delays.stop()
        if self.checks is not None:
            await self.checks.stop()
        if self.acl_reload is not None:
            await self.acl_reload.stop()
        self.store.close()


def ready_line(store: SqlStore, settings: BrokerSettings) -> str | None:
    """The log line of a broker that listens and whose store is at the current schema (one that
    is not has said why at start)."""
    if not store.schema_current:
        return None
    return f"broker ready on {safe_url(settings.database_url)} ({store.dialect} store)"


def compose(settings: BrokerSettings, *, store: SqlStore | None = None) -> Broker:
    """The broker's parts for ``settings``, on ``store`` (default: the SQL store they name)."""
    store = SqlStore(settings) if store is None else store
    clock = now_ms
    arrivals = Arrivals()
    writes = ArrivalsStore(store, arrivals)  # every committed write wakes its topics' receives
    sender = Sender(settings.domain_config(), clock=clock)  # one round-robin for sends and halves
    transactions = TransactionService(
        writes,
        sender,
        CheckBack(settings.check_policy(), clock),
        CallbackPolicy(settings.callback_hosts, parse_address),
    )
    consumers = ConsumerService(
        writes,
        settings.consumer_config(),
        arrivals,
        poll_seconds=settings.receive_poll_seconds,
        max_wait_seconds=settings.receive_max_wait_seconds,
        clock=clock,
        runner=store.claims_runner(),
    )
    metrics, hub = BrokerMetrics(observe=settings.metrics), PullHub()
    if settings.metrics:
        store.writer.on_commit = metrics.observe_commit  # the store knows nothing of metrics
    acl = acl_runtime(settings, store)
    checks = None
    if settings.scheduler:
        checks = CheckBackScheduler(
            transactions,
            metrics,
            hub,
            interval_seconds=settings.transaction_check_interval_seconds,
            push_timeout_seconds=settings.check_timeout_seconds,
            round_max=settings.check_round_max,
            secret_for=None if acl is None else (lambda key: acl.config.secret_for(key)),
        )
    messages = MessageService(writes, sender)
    retention = RetentionService(
        store,
        settings.retention_policy(),
        clock,
        on_round=lambda r: count_round(metrics, r),
        upkeep=store,
    )
    purges = None
    if settings.scheduler:
        purges = RetentionScheduler(
            retention,
            metrics,
            interval_seconds=settings.purge_interval_seconds,
            pause_seconds=settings.purge_pause_seconds,
            share=settings.purge_share,
        )
    clients = ClientService(store, clock)
    presence = PresenceService(
        store,
        BrokerPresence(
            broker_id=settings.broker_name,
            address=settings.listen_address,
            version=broker_version(),
            store_kind=store.dialect,
            started_at=0,  # set by the first beat
            last_seen_at=0,
        ),
        int(settings.broker_beat_seconds * 1000),
        clock,
    )
    served = Served(
        transactions=transactions,
        messages=messages,
        consumers=consumers,
        retention=retention,
        store=store,
        metrics=metrics,
        pull_hub=hub,
        presence=presence,
        clients=clients,
        audit=AuditService(store, clock),
        acl=acl,
        wake_checks=None if checks is None else checks.wake,
    )
    return Broker(
        settings=settings,
        store=store,
        served=served,
        acl_reload=None if acl is None else AclReloadScheduler(acl),
        beats=PresenceScheduler(
            presence, interval_seconds=settings.broker_beat_seconds, probe=store.ping
        ),
        delays=DelayScheduler(messages),
        checks=checks,
        purges=purges,
        grpc=grpc_server(settings, served),
    )


def grpc_server(settings: BrokerSettings, served: Served) -> GrpcServer | None:
    """RocketMQ 5's gRPC port, serving what the HTTP routes serve, when ``grpc_port`` is set; a
    port that would expose signed clients without TLS refuses the start (:func:`check_listen`)."""
    if settings.grpc_port is None:
        return None
    listen = Listen(
        settings.host,
        settings.grpc_port,
        settings.grpc_tls_cert,
        settings.grpc_tls_key,
        settings.grpc_allow_insecure,
    )
    check_listen(listen, acl=served.acl is not None)
    grpc_served = GrpcServed(
        transactions=served.transactions,
        messages=served.messages,
        consumers=served.consumers,
        metrics=served.metrics,
        pull_hub=served.pull_hub,
        acl=served.acl,
        presence=served.presence,
        clients=served.clients,
    )
    return GrpcServer(grpc_served, settings, listen)


def broker_version() -> str:
    """The installed halfmq's version, as the list of brokers shows it."""
    try:
        return version("halfmq")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def acl_runtime(settings: BrokerSettings, store: SqlStore) -> AclRuntime | None:
    """The ACL when ``acl_file`` is set; a malformed file refuses the start (line and reason)."""
    if settings.acl_file is None:
        return None
    return AclRuntime(
        settings.acl_file,
        store,
        now_ms,
        broker_id=settings.broker_name,
        window_ms=int(settings.acl_window_seconds * 1000),
        reload_seconds=settings.acl_reload_seconds,
    )


def build_app(
    settings: BrokerSettings, *, store: SqlStore | None = None, server_gc: bool = False
) -> FastAPI:
    """One broker as an ASGI app.  ``server_gc``: tune the cyclic garbage collector for a process
    that is the broker (not for one that builds many apps, as the tests do), once it has started
    -- see :func:`_tune_gc`."""
    broker = compose(settings, store=store)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await broker.start()
        if server_gc:
            _tune_gc()
        try:
            yield
        finally:
            await broker.stop()

    served = broker.served
    app = create_app(served, settings, lifespan=lifespan)
    if settings.console:
        mount_console(app, settings, audit_log=served.audit, metrics=served.metrics, acl=served.acl)
    return app


def _tune_gc() -> None:
    """The garbage collector tuned for a server (measured on batch sends: bench/README.md,
    "Figures, fourth round", the broker process tunes the garbage collector):

    * ``gc.freeze()``: everything alive once the broker has started (modules, the app, its routes
      and models: over 100,000 objects) leaves the collector's reach.  A full collection walked
      them all every few hundred milliseconds under load, and none of them ever becomes garbage.
    * A young generation of 20,000 allocations instead of 700: a batch request makes over a
      thousand tracked objects that live until it is answered, so at 700 they were walked and
      promoted several times per request.  Objects freed by their reference count (nearly all)
      go as before; only garbage cycles wait longer.
    """
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(SERVER_GC_THRESHOLD, middle, oldest)
