"""What each route needs from a signed account: the ACL's table, read by the gate
(:mod:`broker_service.api.gate`), one entry per (method, route path).

A route missing from the table needs ``admin``: a route added later without a thought for the ACL is
closed, not open.  The table is docs/acl.md's "Permissions per route", entry for entry (a test holds
the two together).

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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
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


def trace_guard(request: Any) -> TraceGuard | None:
    """The per-event guard of a trace report (a Starlette ``Request``); None without the ACL."""
    acl = getattr(request.app.state, "acl", None)
    access_key = getattr(request.state, "access_key", None)
    if acl is None or access_key is None:
        return None
    address = request.client.host if request.client else ""
    return TraceGuard(acl.config, access_key, address)


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
    acl = getattr(request.app.state, "acl", None)
    access_key = getattr(request.state, "access_key", None)
    if acl is None or access_key is None:
        return None
    address = request.client.host if request.client else ""
    return ItemGuard(acl.config, access_key, address)


def read_guard(request: Any) -> Callable[[str], bool] | None:
    """Whether the caller may read a topic's messages (SUB on it, or admin): the filter every
    route that lists messages applies to each one by the topic it belongs to
    (:func:`broker_service.domain.messages.model.topic_of`), so that a half, a delayed, retry or
    dead-letter copy is read as its real topic's, never as the system topic's that holds it.
    None without the ACL or for an admin: every message is readable."""
    acl = getattr(request.app.state, "acl", None)
    access_key = getattr(request.state, "access_key", None)
    if acl is None or access_key is None:
        return None
    config = acl.config
    account = config.account(access_key)
    if account is not None and account.admin:
        return None  # an operator reads every message, op records (which name no topic) too
    address = request.client.host if request.client else ""

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


RULES: dict[tuple[str, str], Rule] = {
    # operations
    ("GET", "/healthz"): public,
    ("GET", "/readyz"): public,
    ("GET", "/metrics"): admin,  # public with acl_public_ops
    ("GET", "/openapi.json"): admin,  # public with acl_public_ops
    ("GET", "/docs"): admin,  # public with acl_public_ops
    ("GET", "/docs/oauth2-redirect"): admin,  # public with acl_public_ops
    ("GET", "/redoc"): admin,  # public with acl_public_ops
    ("POST", "/v1/echo"): admin,
    # topics and sending
    ("POST", "/v1/topics"): admin,
    ("GET", "/v1/topics"): admin,
    ("GET", "/v1/topics/{topic}"): path_topic(SUB),
    ("DELETE", "/v1/topics/{topic}"): admin,
    ("POST", "/v1/topics/{topic}/messages"): path_topic(PUB),
    ("POST", "/v1/topics/{topic}/messages:batch"): path_topic(PUB),
    # transactions
    ("POST", "/v1/transactions"): send_half,
    ("POST", "/v1/transactions/{transaction_id}/commit"): end_transaction,
    ("POST", "/v1/transactions/{transaction_id}/rollback"): end_transaction,
    ("GET", "/v1/transactions/{transaction_id}"): read_transaction,
    ("GET", "/v1/transactions/{transaction_id}/checks"): read_transaction,
    ("GET", "/v1/transactions"): list_transactions,
    ("POST", "/v1/transactions/{transaction_id}/check"): admin,
    # answered item by item: each item as alone (ItemGuard)
    ("POST", "/v1/transactions:batch"): each_item,
    ("POST", "/v1/transactions/decisions:batch"): each_item,
    ("POST", "/v1/messages:batch"): each_item,
    # producer groups and check-back
    ("POST", "/v1/producer-groups/{group}/heartbeat"): path_group(PUB),
    ("GET", "/v1/producer-groups/{group}/checks"): path_group(PUB),
    ("GET", "/v1/producer-groups/{group}"): path_group(PUB),
    ("DELETE", "/v1/producer-groups/{group}"): admin,
    # consumer groups
    ("POST", "/v1/consumer-groups"): create_consumer_group,
    ("POST", "/v1/consumer-groups/{group}/subscriptions"): group_and_body_topic(SUB),
    ("POST", "/v1/consumer-groups/{group}/receive"): group_and_body_topic(SUB),
    ("POST", "/v1/consumer-groups/{group}/ack"): path_group(SUB),
    ("POST", "/v1/consumer-groups/{group}/nack"): path_group(SUB),
    ("POST", "/v1/consumer-groups/{group}/change-invisible"): path_group(SUB),
    ("GET", "/v1/consumer-groups/{group}"): path_group(SUB),
    ("POST", "/v1/consumer-groups/{group}/reset-offset"): admin,
    ("GET", "/v1/consumer-groups/{group}/dlq"): path_group(SUB),
    ("POST", "/v1/consumer-groups/{group}/dlq/{msg_id}/resend"): admin,
    # messages (a message id may be a half's: its body is an operator's to read)
    ("GET", "/v1/messages"): find_messages,
    ("GET", "/v1/messages/{msg_id}"): admin,
    ("GET", "/v1/messages/{msg_id}/trace"): admin,
    ("POST", "/v1/trace"): signed_in,  # each event checked by TraceGuard
    # the store (retention)
    ("GET", "/v1/store/stats"): admin,
    ("POST", "/v1/store/purge"): admin,
    ("GET", "/v1/brokers"): admin,  # the brokers sharing the store: the topology
    # the ACL itself
    ("GET", "/v1/acl"): admin,
    ("GET", "/v1/acl/version"): admin,
    ("PUT", "/v1/acl/accounts/{access_key}"): admin,
    ("DELETE", "/v1/acl/accounts/{access_key}"): admin,
    ("PUT", "/v1/acl/global-white"): admin,
    # the console (a session instead of a signature; each page and action needs what its REST
    # route needs: an operator's commit, rollback and check are admin, as without producer_group)
    ("GET", "/console/login"): public,
    ("POST", "/console/login"): public,
    ("GET", "/console/static/{name}"): public,
    ("GET", "/favicon.ico"): public,  # the console's icon, where browsers look by themselves
    ("POST", "/console/logout"): signed_in,
    ("GET", "/console"): signed_in,  # admin's figures shown to admin only
    ("GET", "/console/topics"): admin,
    ("POST", "/console/topics"): admin,
    ("POST", "/console/topics/{topic}/delete"): admin,
    ("GET", "/console/transactions"): list_transactions,
    ("GET", "/console/transactions/{transaction_id}"): read_transaction,
    ("POST", "/console/transactions/{transaction_id}/commit"): admin,
    ("POST", "/console/transactions/{transaction_id}/rollback"): admin,
    ("POST", "/console/transactions/{transaction_id}/check"): admin,
    ("GET", "/console/producer-groups"): admin,
    ("GET", "/console/producer-groups/{group}"): path_group(PUB),
    ("GET", "/console/consumer-groups"): admin,
    ("GET", "/console/consumer-groups/{group}"): path_group(SUB),
    ("POST", "/console/consumer-groups/{group}/reset-offset"): admin,
    ("GET", "/console/consumer-groups/{group}/dlq"): path_group(SUB),
    ("POST", "/console/consumer-groups/{group}/dlq/resend"): admin,
    ("GET", "/console/messages"): find_messages,
    ("GET", "/console/messages/{msg_id}"): admin,
    ("GET", "/console/reconciliation"): admin,
    ("GET", "/console/reconciliation/{report}"): admin,
    ("POST", "/console/reconciliation/{report}/breaks/{break_id}/status"): admin,
    ("GET", "/console/audit"): admin,
}

# Opened by the setting acl_public_ops (scrapers and API browsers without keys).
OPS_ROUTES = frozenset({"/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


# Paths without parameters by a dict lookup; the others by their patterns, per method.
_STATIC = {(method, path): rule for (method, path), rule in RULES.items() if "{" not in path}
_PATTERNS: dict[str, list[tuple[re.Pattern[str], Rule]]] = {}
for (_method, _path), _rule in RULES.items():
    if "{" in _path:
        _PATTERNS.setdefault(_method, []).append((compile_path(_path)[0], _rule))


def rule_for(method: str, path: str, *, public_ops: bool) -> tuple[Rule, dict[str, str]]:
    """The rule of the route a request goes to, and its path parameters.  Matched against the
    table's own path templates (Starlette's syntax), not the framework's router internals."""
    method = "GET" if method == "HEAD" else method
    if public_ops and method == "GET" and path in OPS_ROUTES:
        return public, {}
    static = _STATIC.get((method, path))
    if static is not None:
        return static, {}
    for pattern, rule in _PATTERNS.get(method, ()):
        found = pattern.match(path)
        if found:
            return rule, found.groupdict()
    return admin, {}  # no route, or another method's (404, 405)
