"""The app factory: ``create_app(settings)`` builds one broker; nothing is built at import time."""

from __future__ import annotations

import gc
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from broker_service.acl.runtime import AclRuntime
from broker_service.api import bodies, errors
from broker_service.api.gate import AclGate
from broker_service.api.hardening import HeaderLimits, TrustedHosts, allowed_hosts
from broker_service.api.limits import BodyLimit
from broker_service.api.metrics import BrokerMetrics
from broker_service.api.routes import acl as acl_routes
from broker_service.api.routes import checks, messages, ops, producers, topics, transactions
from broker_service.api.routes import consumers as consumer_routes
from broker_service.domain.callbacks import CallbackPolicy
from broker_service.domain.checkback import CheckBack, CheckPolicy
from broker_service.domain.config import DomainConfig
from broker_service.domain.service import BrokerService
from broker_service.logs import redact, safe_url
from broker_service.schedulers.checkback import CheckBackScheduler, PullHub
from broker_service.schedulers.delays import DelayScheduler
from broker_service.settings import BrokerSettings
from broker_service.store.sql_store import SqlStore

log = logging.getLogger("halfmq.broker")


def domain_config(settings: BrokerSettings) -> DomainConfig:
    return DomainConfig(
        auto_create_topics=settings.auto_create_topics,
        default_topic_queues=settings.default_topic_queues,
        max_message_bytes=settings.max_message_bytes,
        delay_levels_ms=settings.delay_levels_ms,
        transaction_timeout_ms=int(settings.transaction_timeout_seconds * 1000),
        max_delay_ms=int(settings.max_delay_seconds * 1000),
    )


def check_policy(settings: BrokerSettings) -> CheckPolicy:
    return CheckPolicy(
        check_max=settings.transaction_check_max,
        interval_ms=int(settings.transaction_check_interval_seconds * 1000),
        producer_expiry_ms=int(settings.producer_expiry_seconds * 1000),
        push_timeout_ms=int(settings.check_timeout_seconds * 1000),
        unreachable_ms=int(settings.check_unreachable_seconds * 1000),
        undelivered_alert_ms=int(settings.check_undelivered_alert_seconds * 1000),
        broker_id=settings.broker_id or f"{socket.gethostname()}:{os.getpid()}:{settings.port}",
    )


def request_limit(settings: BrokerSettings) -> int:
    """A request may carry one max-size message as base64 plus its JSON around it."""
    return settings.max_message_bytes * 4 // 3 + 64 * 1024


# The young generation's threshold in a broker process (CPython's default: 700 allocations).
SERVER_GC_THRESHOLD = 20_000


def _tune_gc() -> None:
    """Measured on batch sends (bench/README.md), per message of a batch of 100:

    * ``gc.freeze()``: everything alive once the broker has started (modules, the app, its routes
      and models: over 100,000 objects) leaves the collector's reach.  A full collection walked
      them all every few hundred milliseconds under load, and none of them ever becomes garbage:
      40 -> 28 us of CPU.
    * A young generation of 20,000 allocations instead of 700: a batch request makes over a
      thousand tracked objects that live until it is answered, so at 700 they were walked and
      promoted several times per request: 20.7 -> 17.8 us in interleaved runs.  Objects freed by
      their reference count (nearly all) go as before; only garbage cycles wait longer.
    """
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(SERVER_GC_THRESHOLD, middle, oldest)


def acl_runtime(settings: BrokerSettings, service: BrokerService) -> AclRuntime | None:
    """The ACL when ``acl_file`` is set; a malformed file refuses the start (line and reason)."""
    if settings.acl_file is None:
        return None
    return AclRuntime(
        settings.acl_file,
        service.store,
        service.clock,
        broker_id=settings.broker_id or f"{socket.gethostname()}:{os.getpid()}:{settings.port}",
        window_ms=int(settings.acl_window_seconds * 1000),
        reload_seconds=settings.acl_reload_seconds,
    )


def create_app(settings: BrokerSettings, *, server_gc: bool = False) -> FastAPI:
    """``server_gc``: tune the cyclic garbage collector for a process that is the broker (not for
    one that builds many apps, as the tests do), once it has started -- see :func:`_tune_gc`."""
    store = SqlStore(settings)
    service = BrokerService(store, domain_config(settings))
    metrics = BrokerMetrics()
    checkback = CheckBack(check_policy(settings), service.clock)
    hub = PullHub()
    acl = acl_runtime(settings, service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store.open()
        where = safe_url(settings.database_url)
        if store.schema_current:
            log.info("broker ready on %s (%s store)", where, store.dialect)
        else:
            reason = redact(store.schema_reason)
            log.warning(
                "broker started on %s (%s store), not ready: %s", where, store.dialect, reason
            )
        if acl is not None and store.schema_current:
            await acl.start()
        scheduler = None
        delays = DelayScheduler(service)
        if settings.scheduler:
            delays.start()
            scheduler = CheckBackScheduler(
                service,
                checkback,
                metrics,
                hub,
                interval_seconds=settings.transaction_check_interval_seconds,
                push_timeout_seconds=settings.check_timeout_seconds,
                round_max=settings.check_round_max,
                secret_for=None if acl is None else (lambda key: acl.config.secret_for(key)),
            )
            scheduler.start()
        app.state.scheduler = scheduler
        if server_gc:
            _tune_gc()
        try:
            yield
        finally:
            await delays.stop()
            if scheduler is not None:
                await scheduler.stop()
            if acl is not None:
                await acl.stop()
            store.close()

    app = FastAPI(
        title="halfmq broker",
        version="1",
        summary="RocketMQ-style transactional (half) messages over REST",
        lifespan=lifespan,
        # FastAPI's native OpenTelemetry (spans and metrics per request for a configured
        # provider) is the `opentelemetry` setting; off, its per-request check is skipped.
        telemetry=None
        if settings.opentelemetry
        else {"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = metrics
    app.state.service = service
    app.state.checkback = checkback
    app.state.pull_hub = hub
    app.state.acl = acl
    app.state.callbacks = CallbackPolicy(settings.callback_hosts)
    errors.install(app)
    for module in (topics, transactions, producers, checks, messages, ops, acl_routes):
        app.include_router(module.router)
    consumer_routes.install(app, settings, service, check_policy(settings).broker_id)
    bodies.install_schemas(app)
    # Outermost last: header limits, then the Host check, then the body limit, then the ACL gate
    # (which reads the body to check its signature, inside the body limit).
    app.add_middleware(
        AclGate,
        acl=acl,
        public_ops=settings.acl_public_ops,
        rate_per_second=settings.acl_rate_limit,
    )
    app.add_middleware(BodyLimit, limit=request_limit(settings))
    app.add_middleware(TrustedHosts, allowed_hosts=allowed_hosts(settings))
    app.add_middleware(
        HeaderLimits, max_bytes=settings.max_header_bytes, max_headers=settings.max_headers
    )
    return app
