"""What each route needs from a signed account: the rules, and the gate's table of them
(:class:`RouteRules`, read by :mod:`broker_service.api.gate`).

Each route declares its rule next to its definition (:func:`needs`, under the route decorator);
the table is built from the app's routes once, at start-up, one entry per (method, route path).
A route that declares nothing needs ``admin``: a route added later without a thought for the ACL
is closed, not open (and a test fails).  docs/acl.md's "Permissions per route" lists every route's
rule (a test holds the two together).

Some needs are read from the request: the body's topic and producer group of a half, the producer
group a commit or rollback names.  The topic of the transaction a commit or rollback ends is checked
where the broker reads that transaction anyway, in the resolving unit (:class:`TransactionGuard`),
so the gate adds no store read to the hottest route.  A need whose resource cannot be read yet (a
malformed body, an unknown transaction) is "any known account": the route then answers 404 or 422
as it would without the ACL.

A request answered item by item (``POST /v1/transactions:batch``, ``POST
/v1/transactions/decisions:batch``, ``POST /v1/messages:batch``) needs any known account at the
gate; each item then needs what it would need alone, checked by its route (:class:`ItemGuard`), so
an item the account may not send is refused 403 on its own and its neighbours go on.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import orjson
from starlette.routing import compile_path

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.acl.model import AclConfig, Need, Perm
from broker_service.domain.errors import DomainError, Forbidden
from broker_service.domain.transactions.model import TransactionRecord
from broker_service.domain.transactions.service import TransactionService

PUB, SUB = Perm.PUB, Perm.SUB


@dataclass(slots=True)
class Ask:
    """The request as far as the table needs it."""

    path_params: Mapping[str, str]
    raw_query: str
    body: bytes
    service: TransactionService
    parsed: dict[str, Any] | None = None
    transaction_topic: Perm | None = None  # checked by the route's unit: TransactionGuard

    def query_value(self, name: str) -> str | None:
        """A query parameter (its last value), read only by the rules that need one."""
        value = None
        for key, found in parse_qsl(self.raw_query):
            if key == name:
                value = found
        return value

    def _fields(self) -> dict[str, Any]:
        """The body as a JSON object, parsed once ({} when it is not one: the route will say)."""
        if self.parsed is None:
            try:
                value = orjson.loads(self.body) if self.body else None
            except orjson.JSONDecodeError:
                value = None
            self.parsed = value if isinstance(value, dict) else {}
        return self.parsed

    def json_field(self, name: str) -> str | None:
        value = self._fields().get(name)
        return value if isinstance(value, str) else None

    def has_field(self, name: str) -> bool:
        return self._fields().get(name) is not None

    def field_key(self, name: str) -> object:
        """What a rule can tell of the field: its text, None when absent or null, or
        :data:`NOT_TEXT` -- a key for what the gate remembers (:data:`BY_BODY`)."""
        value = self._fields().get(name)
        return value if value is None or isinstance(value, str) else NOT_TEXT


NOT_TEXT = object()  # a body field that is there but not a string (the route will answer 422)


Rule = Callable[[Ask], Awaitable[list[Need]]]

# Rules whose needs follow from the method and path alone (not the body, the query or the store):
# the gate may remember that it allowed an account such a request.
BY_PATH: set[Rule] = set()


def by_path(rule: Rule) -> Rule:
    BY_PATH.add(rule)
    return rule


# Rules whose needs follow from the method, the path and the named body fields alone (no path
# parameter, no query, no store read): the gate may remember what it allowed an account for the
# same values of those fields (a producer names one topic and one group all day long).
BY_BODY: dict[Rule, tuple[str, ...]] = {}


def by_body(*names: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        BY_BODY[rule] = names
        return rule

    return register


@by_path
async def public(_: Ask) -> list[Need]:
    return [Need.public()]


@by_path
async def admin(_: Ask) -> list[Need]:
    return [Need.admin()]


def _named(kind: Callable[[str, Perm], Need], name: str | None, perm: Perm) -> list[Need]:
    return [] if name is None else [kind(name, perm)]


def path_topic(perm: Perm) -> Rule:
    async def rule(ask: Ask) -> list[Need]:
        return [Need.topic(ask.path_params["topic"], perm)]

    return by_path(rule)


def path_group(perm: Perm) -> Rule:
    async def rule(ask: Ask) -> list[Need]:
        return [Need.group(ask.path_params["group"], perm)]

    return by_path(rule)


def group_and_body_topic(perm: Perm) -> Rule:
    """The group in the path, and the body's topic when it names one."""

    async def rule(ask: Ask) -> list[Need]:
        topic = _named(Need.topic, ask.json_field("topic"), perm)
        return [Need.group(ask.path_params["group"], perm), *topic]

    return rule


@by_body("topic", "producer_group")
async def send_half(ask: Ask) -> list[Need]:
    return [
        *_named(Need.topic, ask.json_field("topic"), PUB),
        *_named(Need.group, ask.json_field("producer_group"), PUB),
    ]


@by_body("producer_group")
async def end_transaction(ask: Ask) -> list[Need]:
    """Commit or rollback: PUB on the producer group the body names, here; PUB on the
    transaction's own group and topic as the route reads it (:class:`TransactionGuard`), before
    the broker compares the groups (409 ``PRODUCER_GROUP_MISMATCH``).  Without a
    ``producer_group`` in the body it is an operator's decision (admin)."""
    if not ask.has_field("producer_group"):
        return [Need.admin()]
    ask.transaction_topic = PUB  # and the transaction's own group, if another: TransactionGuard
    return _named(Need.group, ask.json_field("producer_group"), PUB)


async def read_transaction(ask: Ask) -> list[Need]:
    """PUB on the transaction's producer group: its state and checks (no body; the console's
    page shows the message's body only to an account that may read its topic)."""
    try:
        record = await ask.service.get_transaction(ask.path_params["transaction_id"])
    except DomainError:
        return []  # unknown (or a bad id): the route answers 404 / 422
    return [Need.group(record.producer_group, PUB)]


@dataclass(frozen=True, slots=True)
class TransactionGuard:
    """The needs on the transaction a commit or rollback ends -- on its own producer group and its
    topic -- checked by the resolving unit once it has read the transaction, before anything
    else: an account without them learns neither the group nor the state.  The gate keeps one
    guard per account, address and named group while an ACL version is enforced, and the guard
    remembers the (topic, group) pairs it allowed."""

    config: AclConfig
    access_key: str
    address: str
    perm: Perm
    checked_group: str | None  # the group the body named, which the gate has checked already
    # ``authorize``, or the gate's, which remembers what it allowed under ``config``.
    decide: Callable[[AclConfig, str, str, list[Need]], None] = authorize
    _allowed: set[tuple[str, str]] = field(default_factory=set, compare=False)

    def __call__(self, record: TransactionRecord) -> None:
        pair = (record.topic, record.producer_group)
        if pair in self._allowed:
            return
        needs = [Need.topic(record.topic, self.perm)]
        if record.producer_group != self.checked_group:
            needs.append(Need.group(record.producer_group, self.perm))
        try:
            self.decide(self.config, self.access_key, self.address, needs)
        except AclError as error:
            raise Forbidden(error.message, code=str(error.code), **error.detail) from None
        if len(self._allowed) >= _GUARD_MEMORY:
            self._allowed.clear()
        self._allowed.add(pair)  # a set's add is atomic: guards run on the writer thread


_GUARD_MEMORY = 1024  # (topic, group) pairs a guard remembers


def transaction_guard(state: Any) -> TransactionGuard | None:
    """The guard the gate left for this request (``request.state``); None without the ACL."""
    guard = getattr(state, "transaction_guard", None)
    return guard if isinstance(guard, TransactionGuard) else None


@dataclass(frozen=True, slots=True)
class TraceGuard:
    """The needs of one client trace report (``POST /v1/trace``), checked per event by the unit
    that records them, once it has read the message: a PUB report needs PUB on the message's topic
    and producer group, a SUB report SUB on its topic and the consumer group -- no account writes
    the trace of a message it could not have sent or received."""

    config: AclConfig
    access_key: str
    address: str

    def __call__(self, kind: str, topic: str, group: str) -> None:
        perm = PUB if kind == "PUB" else SUB
        try:
            authorize(
                self.config,
                self.access_key,
                self.address,
                [Need.topic(topic, perm), Need.group(group, perm)],
            )
        except AclError as error:
            raise Forbidden(error.message, code=str(error.code), **error.detail) from None


def _caller(request: Any) -> tuple[AclConfig, str, str] | None:
    """The ACL's accounts, the request's access key and the client's address, that a guard
    checks a request's needs with (a Starlette ``Request``); None without the ACL."""
    acl = getattr(request.app.state, "acl", None)
    access_key = getattr(request.state, "access_key", None)
    if acl is None or access_key is None:
        return None
    return acl.config, access_key, request.client.host if request.client else ""


def trace_guard(request: Any) -> TraceGuard | None:
    """The per-event guard of a trace report (a Starlette ``Request``); None without the ACL."""
    caller = _caller(request)
    return None if caller is None else TraceGuard(*caller)


@dataclass(slots=True)
class ItemGuard:
    """The needs of each item of a request answered item by item, checked on its own by the
    route before the item goes to the domain: an item is refused 403 as it would be alone, and
    the others are not.  The same needs as the single routes' rules (``send_half``,
    ``end_transaction``, ``path_topic(PUB)``); a decision's needs on its transaction's topic and
    group are left to the resolving unit, as a single commit's are (:meth:`transaction_guard`).

    What it allowed is remembered for the request: a producer's batch names one topic and one
    group over and over, and each item would otherwise walk the account's permissions again."""

    config: AclConfig
    access_key: str
    address: str
    _allowed: set[tuple[Any, ...]] = field(default_factory=set)  # (access key, address, *needs)

    def half(self, topic: str, producer_group: str) -> None:
        """A half: PUB on its topic and on its producer group (as ``POST /v1/transactions``)."""
        self._require([Need.topic(topic, PUB), Need.group(producer_group, PUB)])

    def send(self, topic: str) -> None:
        """A plain send: PUB on its topic (as ``POST /v1/topics/{topic}/messages``)."""
        self._require([Need.topic(topic, PUB)])

    def decision(self, producer_group: str | None) -> TransactionGuard:
        """A commit or rollback: PUB on the group it names here, then PUB on its transaction's
        topic and group in the unit (the guard returned); none named: an operator's, admin."""
        if producer_group is None:
            self._require([Need.admin()])
        else:
            self._require([Need.group(producer_group, PUB)])
        return TransactionGuard(
            self.config, self.access_key, self.address, PUB, producer_group, self._decide
        )

    def _require(self, needs: list[Need]) -> None:
        try:
            self._decide(self.config, self.access_key, self.address, needs)
        except AclError as error:
            raise Forbidden(error.message, code=str(error.code), **error.detail) from None

    def _decide(self, config: AclConfig, access_key: str, address: str, needs: list[Need]) -> None:
        """:func:`authorize`, once per distinct needs in this request (also from the writer
        thread, for a decision's :class:`TransactionGuard`: a set's add is atomic)."""
        key = (access_key, address, *needs)
        if key in self._allowed:
            return
        authorize(config, access_key, address, needs)
        self._allowed.add(key)


def item_guard(request: Any) -> ItemGuard | None:
    """The per-item guard of a request answered item by item (a Starlette ``Request``); None
    without the ACL."""
    caller = _caller(request)
    return None if caller is None else ItemGuard(*caller)


def read_guard(request: Any) -> Callable[[str], bool] | None:
    """Whether the caller may read a topic's messages (SUB on it, or admin): the filter every
    route that lists messages applies to each one by the topic it belongs to
    (:func:`broker_service.domain.messages.model.topic_of`), so that a half, a delayed, retry or
    dead-letter copy is read as its real topic's, never as the system topic's that holds it.
    None without the ACL or for an admin: every message is readable."""
    caller = _caller(request)
    if caller is None:
        return None
    config, access_key, address = caller
    account = config.account(access_key)
    if account is not None and account.admin:
        return None  # an operator reads every message, op records (which name no topic) too

    def may_read(topic: str) -> bool:
        try:
            authorize(config, access_key, address, [Need.topic(topic, SUB)])
        except AclError:
            return False
        return True

    return may_read


async def list_transactions(ask: Ask) -> list[Need]:
    group = ask.query_value("producer_group")
    return [Need.group(group, PUB)] if group else [Need.admin()]


async def find_messages(ask: Ask) -> list[Need]:
    """SUB on the topic queried; by key alone, admin.  A system topic's messages (halves, op
    records, delayed, retry and dead-letter copies) are then filtered one by one by their real
    topic (:func:`read_guard`): SUB on ``RMQ_SYS_TRANS_HALF_TOPIC`` reads no half by itself."""
    topic = ask.query_value("topic")
    return [Need.topic(topic, SUB)] if topic else [Need.admin()]


@by_body("name")
async def create_consumer_group(ask: Ask) -> list[Need]:
    """A consumer declares its own group on start (RocketMQ's autoCreateSubscriptionGroup)."""
    return _named(Need.group, ask.json_field("name"), SUB)


@by_path
async def signed_in(_: Ask) -> list[Need]:
    """Any known account (from an allowed address): the console's overview and logout, a trace
    report (whose events are checked one by one)."""
    return []


@by_path
async def each_item(_: Ask) -> list[Need]:
    """Any known account at the gate; each item then needs what it would need alone, checked by
    the route (:class:`ItemGuard`) and refused on its own."""
    return []


# Opened by the setting acl_public_ops (scrapers and API browsers without keys).
OPS_ROUTES = frozenset({"/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})

_DECLARED = "__halfmq_needs__"  # the attribute a route's endpoint carries its rule in

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def needs(rule: Rule) -> Callable[[Endpoint], Endpoint]:
    """Declares what a route needs, under its route decorator::

        @router.post("/{topic}/messages", ...)
        @needs(path_topic(PUB))
        async def send_message(...): ...

    The rule rides on the endpoint function and is read once, when the gate builds its table
    (:class:`RouteRules`); a request costs nothing more."""

    def declare(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _DECLARED, rule)
        return endpoint

    return declare


def declared(route: Any) -> Rule | None:
    """The rule a route's endpoint declares; None when it declares none."""
    return getattr(getattr(route, "endpoint", None), _DECLARED, None)


def each_route(routes: Iterable[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every route with its full path, inside included routers too (FastAPI keeps an included
    router as one entry holding its ``original_router``)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from each_route(inner.routes, prefix + getattr(context, "prefix", ""))
        elif isinstance(getattr(route, "path", None), str):
            yield prefix + route.path, route


@dataclass(frozen=True, slots=True)
class RouteRules:
    """The gate's table, built once at start-up from the routes' own declarations: the rule of
    each (method, path template).  A route that declares none needs admin (closed, not open;
    ``undeclared`` names them, and a test holds it empty); a path no route serves needs admin."""

    rules: dict[tuple[str, str], Rule]
    undeclared: tuple[tuple[str, str], ...] = ()
    _static: dict[tuple[str, str], Rule] = field(default_factory=dict)
    _patterns: dict[str, list[tuple[re.Pattern[str], Rule]]] = field(default_factory=dict)

    @classmethod
    def of(cls, routes: Iterable[Any], *, public_ops: bool = False) -> RouteRules:
        """``public_ops``: the operations pages (:data:`OPS_ROUTES`) are public."""
        rules: dict[tuple[str, str], Rule] = {}
        undeclared: list[tuple[str, str]] = []
        for path, route in each_route(routes):
            rule = declared(route)
            for method in sorted(getattr(route, "methods", None) or ()):
                if method == "HEAD" or (method, path) in rules:
                    continue  # HEAD is its GET's; the first route of a method and path serves
                if rule is None:
                    undeclared.append((method, path))
                opened = public_ops and method == "GET" and path in OPS_ROUTES
                rules[method, path] = public if opened else rule or admin
        table = cls(rules, tuple(undeclared))
        for (method, path), rule in rules.items():
            if "{" in path:
                table._patterns.setdefault(method, []).append((compile_path(path)[0], rule))
            else:
                table._static[method, path] = rule
        return table

    def rule_for(self, method: str, path: str) -> tuple[Rule, dict[str, str]]:
        """The rule of the route a request goes to, and its path parameters.  Matched against
        the routes' own path templates (Starlette's syntax), not the router's internals."""
        method = "GET" if method == "HEAD" else method
        static = self._static.get((method, path))
        if static is not None:
            return static, {}
        for pattern, rule in self._patterns.get(method, ()):
            found = pattern.match(path)
            if found:
                return rule, found.groupdict()
        return admin, {}  # no route, or another method's (404, 405)
