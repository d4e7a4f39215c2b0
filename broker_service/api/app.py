"""The HTTP app: ``create_app`` takes what it serves -- the domain's services, the store's probe,
the metrics, the ACL runtime -- and builds none of them (:mod:`broker_service.app` does).  It adds
the routes, the error envelopes, and the middleware every request passes, outermost last.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from fastapi import APIRouter, FastAPI
from starlette.types import ASGIApp

from broker_service.acl.runtime import AclRuntime
from broker_service.api import errors
from broker_service.api.audit import AdminAudit
from broker_service.api.gate import AclGate
from broker_service.api.hardening import HeaderLimits, TrustedHosts, allowed_hosts
from broker_service.api.limits import BodyLimit
from broker_service.api.observe import RequestTimer, RouteTemplates
from broker_service.api.permissions import (
    OPS_ROUTES,
    RouteRules,
    admin,
    declared,
    each_route,
    needs,
)
from broker_service.api.routes import acl as acl_routes
from broker_service.api.routes import brokers as broker_routes
from broker_service.api.routes import checks, messages, ops, producers, store, topics, transactions
from broker_service.api.routes import consumers as consumer_routes
from broker_service.api.routes import items as item_routes
from broker_service.api.routes import trace as trace_routes
from broker_service.api.schemas import bodies
from broker_service.domain.audit.service import AuditService
from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.clients.service import ClientService
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import StoreProbe
from broker_service.domain.retention.service import RetentionService
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics
from broker_service.settings import BrokerSettings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


@dataclass(frozen=True, slots=True)
class Served:
    """What the routes serve: the domain's services, and what they read besides."""

    transactions: TransactionService
    messages: MessageService
    consumers: ConsumerService
    retention: RetentionService
    store: StoreProbe  # readiness and the writer's counts
    metrics: BrokerMetrics
    pull_hub: PullHub  # woken by the check-back scheduler, waited on by pull long-polls
    presence: PresenceService  # the brokers sharing the store
    clients: ClientService  # the gRPC clients' profiles (the console names their language)
    audit: AuditService  # the audit log admin actions are written to
    acl: AclRuntime | None = None
    wake_checks: Callable[[], None] | None = None  # run the next check round now


# Every router of the REST contract, the hottest first: a request is matched against the routes in
# this order (no two routes match one method and path: tests/unit/broker_service/api/test_app_routes.py).
ROUTERS = (
    transactions.router,  # a half, its commit or rollback
    topics.router,  # a send, a batch
    consumer_routes.router,  # receive, ack, nack
    item_routes.router,
    item_routes.sends_router,
    producers.router,
    checks.router,
    messages.router,
    consumer_routes.trace_router,
    trace_routes.router,
    ops.router,
    store.router,
    acl_routes.router,
    broker_routes.router,
)


def add_routes(app: FastAPI, routers: tuple[APIRouter, ...]) -> None:
    """The routers' routes, added to the app's own table as they are.  ``include_router`` would
    keep each router as a node that FastAPI (0.140 on) matches a request against twice, route by
    route, behind every router before it: measured, most of the echo route's time in process.
    Flat, a request meets each route once, the hottest first.  The routers have no dependencies
    of their own, and their prefixes, tags and responses are in their routes already, so the
    OpenAPI document is the same (the test holds it)."""
    for router in routers:
        app.router.routes.extend(router.routes)


def declare_framework_routes(app: FastAPI) -> None:
    """FastAPI's own pages (the OpenAPI document, its two browsers), which it adds itself, are
    declared here, as each of ours is where it is defined: an operator's, public with
    ``acl_public_ops``."""
    for path, route in each_route(app.routes):
        if path in OPS_ROUTES and declared(route) is None:
            needs(admin)(route.endpoint)


def acl_gate(
    app: FastAPI, served: Served, settings: BrokerSettings
) -> Callable[[ASGIApp], ASGIApp]:
    """The ACL gate, its table built from what every route of ``app`` declares when Starlette
    builds the middleware -- once, at start-up, after the console has mounted its routes."""

    def build(inner: ASGIApp) -> ASGIApp:
        routes = RouteRules.of(app.routes, public_ops=settings.acl_public_ops)
        return AclGate(inner, served.acl, routes=routes, rate_per_second=settings.acl_rate_limit)

    return build


def request_timer(app: FastAPI, served: Served) -> Callable[[ASGIApp], ASGIApp]:
    """The request timer, with the path templates of every route the app has at start-up."""

    def build(inner: ASGIApp) -> ASGIApp:
        paths = [path for path, _route in each_route(app.routes)]
        templates = RouteTemplates([*paths, *OPS_ROUTES])
        return RequestTimer(inner, histogram=served.metrics.request_seconds, templates=templates)

    return build


def request_limit(settings: BrokerSettings) -> int:
    """A request may carry one max-size message as base64 plus its JSON around it."""
    return settings.max_message_bytes * 4 // 3 + 64 * 1024


def create_app(
    served: Served, settings: BrokerSettings, *, lifespan: Lifespan | None = None
) -> FastAPI:
    """``lifespan``: what runs around serving (opening the store, the background work)."""
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
    app.state.transactions = served.transactions
    app.state.messages = served.messages
    app.state.consumers = served.consumers
    app.state.retention = served.retention
    app.state.store = served.store
    app.state.metrics = served.metrics
    app.state.pull_hub = served.pull_hub
    app.state.acl = served.acl
    app.state.wake_checks = served.wake_checks
    app.state.presence = served.presence
    app.state.clients = served.clients
    errors.install(app)
    add_routes(app, ROUTERS)
    declare_framework_routes(app)
    bodies.install_schemas(app)
    # Outermost last: the request timer (the `metrics` setting), header limits, then the Host
    # check, then the body limit, then the ACL gate (which reads the body to check its signature,
    # inside the body limit).
    app.add_middleware(acl_gate(app, served, settings))
    # Outside the gate: a refused admin action is audited too.
    app.add_middleware(
        AdminAudit, audit=served.audit, metrics=served.metrics, acl_on=served.acl is not None
    )
    app.add_middleware(BodyLimit, limit=request_limit(settings))
    app.add_middleware(TrustedHosts, allowed_hosts=allowed_hosts(settings))
    app.add_middleware(
        HeaderLimits, max_bytes=settings.max_header_bytes, max_headers=settings.max_headers
    )
    if served.metrics.observe:
        app.add_middleware(request_timer(app, served))
    return app
