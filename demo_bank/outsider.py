"""The outsider: while transfers flow, a real account of the broker (``outsider``, which may only
use its own topic and group) tries to get in where it does not belong, against one of Bob's real
transactions -- the newest still open, else the newest.  Each attempt's HTTP status and error code
is recorded; the run passes only when every one was refused with the code docs/acl.md (or, for
a request the ACL lets through, the broker) gives, and the attacked transaction still ended as Bob
decided.

What it tries: to end Bob's transaction (unsigned, with an unknown key, with Bob's key and a
guessed secret, as itself naming Bob's producer group or its own, as an operator would), to steal
Bob's check-backs (a heartbeat into ``bob-bank`` with its own callback, pulling ``bob-bank``'s
checks), to aim its own group's check-backs at a metadata address, to read the half's body, to
slip a forged transfer into ``transfers``, to receive Smith's transfers, and to replay a request
of Bob's sniffed off the wire."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from sqlalchemy import case, select

from broker_service.store import schema as broker_schema
from demo_bank.acl import OUTSIDER_GROUP, DemoKeys, new_secret
from demo_bank.db import make_engine
from demo_bank.proof import HALF_TOPIC, BankView, BrokerView, Invariant
from demo_bank.settings import BOB_GROUP, SMITH_GROUP, TOPIC
from framework.signing import Credentials, HalfmqAuth, sign_headers

CLIENT_ID = "outsider-1"
UNKNOWN_ACCESS_KEY = "mallory-bank"
OWN_CALLBACK = "http://127.0.0.1:8099/halfmq/check"  # where it would like Bob's checks to go
METADATA_CALLBACK = "http://169.254.169.254/latest/meta-data/"

# Who signs a probe: nobody, an access key the broker does not know, Bob's access key with a
# guessed secret, or the outsider's own (real) account.
UNSIGNED, UNKNOWN_KEY, GUESSED_SECRET, ITSELF = (
    "unsigned",
    "unknown key",
    "guessed secret",
    "itself",
)


@dataclass(frozen=True, slots=True)
class Target:
    """The Bob transaction the outsider goes after, as the broker's store showed it then."""

    transaction_id: str
    msg_id: str
    transfer_id: str
    state: str


@dataclass(frozen=True, slots=True)
class Probe:
    """One request the outsider tries, and the refusal docs/acl.md says it must get."""

    key: str
    what: str
    method: str
    path: str  # {tx}: the target's transaction id; {msg}: its half's message id
    signer: str
    expected_status: int
    expected_code: str
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None

    def url(self, target: Target) -> str:
        return self.path.format(tx=target.transaction_id, msg=target.msg_id)


@dataclass(frozen=True, slots=True)
class Attempt:
    key: str
    what: str
    request: str  # method and path template, as the report shows it
    expected_status: int
    expected_code: str
    status: int | None  # None: no answer at all
    code: str | None
    note: str = ""

    @property
    def refused(self) -> bool:
        return self.status is not None and 400 <= self.status < 500

    @property
    def as_expected(self) -> bool:
        return (self.status, self.code) == (self.expected_status, self.expected_code)


@dataclass
class OutsiderReport:
    target: Target | None
    attempts: list[Attempt] = field(default_factory=list)
    note: str = ""

    @property
    def refused(self) -> int:
        return sum(1 for a in self.attempts if a.refused)

    @property
    def unexpected(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.as_expected]

    def summary(self) -> str:
        return f"{len(self.attempts)} attempts, {self.refused} refused"


COMMIT, ROLLBACK = "/v1/transactions/{tx}/commit", "/v1/transactions/{tx}/rollback"
BOB_BODY = {"producer_group": BOB_GROUP}
PROBES = (
    Probe("unsigned", "commit Bob's transaction, unsigned",
          "POST", COMMIT, UNSIGNED, 401, "SIGNATURE_MISSING", BOB_BODY),
    Probe("unknown-key", f"commit it, signed with an unknown access key ({UNKNOWN_ACCESS_KEY})",
          "POST", COMMIT, UNKNOWN_KEY, 401, "ACCESS_KEY_UNKNOWN", BOB_BODY),
    Probe("guessed-secret", "commit it, signed with Bob's access key and a guessed secret",
          "POST", COMMIT, GUESSED_SECRET, 401, "SIGNATURE_INVALID", BOB_BODY),
    Probe("commit-as-bob", f"commit it as itself, naming producer group {BOB_GROUP}",
          "POST", COMMIT, ITSELF, 403, "PERMISSION_DENIED", BOB_BODY),
    # The gate lets it through (PUB on its own group); the broker, reading the transaction,
    # weighs the needs on its real group and topic before anything else (permissions.py's
    # TransactionGuard), so the refusal names neither Bob's group nor the state.
    Probe("commit-own-group", f"commit it as itself, naming its own group {OUTSIDER_GROUP}",
          "POST", COMMIT, ITSELF, 403, "PERMISSION_DENIED",
          {"producer_group": OUTSIDER_GROUP}),
    Probe("operator-rollback", "roll it back as an operator would (no producer_group)",
          "POST", ROLLBACK, ITSELF, 403, "PERMISSION_DENIED", {}),
    Probe("hijack-heartbeat", f"heartbeat into {BOB_GROUP} with its own callback URL",
          "POST", f"/v1/producer-groups/{BOB_GROUP}/heartbeat", ITSELF, 403, "PERMISSION_DENIED",
          {"client_id": CLIENT_ID, "callback_url": OWN_CALLBACK, "topics": [TOPIC]}),
    Probe("pull-checks", f"pull {BOB_GROUP}'s check-backs",
          "GET", f"/v1/producer-groups/{BOB_GROUP}/checks", ITSELF, 403, "PERMISSION_DENIED",
          params={"client_id": CLIENT_ID, "wait_seconds": "0"}),
    Probe("metadata-callback", "aim its own group's check-backs at 169.254.169.254",
          "POST", f"/v1/producer-groups/{OUTSIDER_GROUP}/heartbeat", ITSELF, 403,
          "CALLBACK_NOT_ALLOWED", {"client_id": CLIENT_ID, "callback_url": METADATA_CALLBACK}),
    Probe("read-half", "read the half's body",
          "GET", "/v1/messages/{msg}", ITSELF, 403, "PERMISSION_DENIED"),
    Probe("forge-transfer", f"publish a forged transfer to topic {TOPIC}",
          "POST", f"/v1/topics/{TOPIC}/messages", ITSELF, 403, "PERMISSION_DENIED",
          {"body": '{"transfer_id": "t-forged", "from": "bob-1", "to": "smith-1", '
                   '"amount": 100000}', "keys": ["t-forged"], "tags": "transfer"}),
    Probe("steal-credits", f"receive Smith's transfers in group {SMITH_GROUP}",
          "POST", f"/v1/consumer-groups/{SMITH_GROUP}/receive", ITSELF, 403, "PERMISSION_DENIED",
          {"client_id": CLIENT_ID, "topic": TOPIC, "max_messages": 32}),
)  # fmt: skip
REPLAY_PATH = f"/v1/producer-groups/{BOB_GROUP}"


def find_target(broker_db: str) -> Target | None:
    """The newest transaction of ``bob-bank`` still PREPARED (the one a successful attack would
    hurt most), else the newest; read from the broker's store as the runner reads it."""
    t, m = broker_schema.transactions, broker_schema.messages
    open_first = case((t.c.state == "PREPARED", 0), else_=1)
    engine = make_engine(broker_db)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                select(t.c.transaction_id, t.c.msg_id, t.c.state)
                .where(t.c.producer_group == BOB_GROUP)
                .order_by(open_first, t.c.created_at.desc())
                .limit(1)
            ).first()
            if row is None:
                return None
            keys = conn.execute(
                select(m.c["keys"]).where(m.c.msg_id == row.msg_id, m.c.topic == HALF_TOPIC)
            ).scalar()
    finally:
        engine.dispose()
    transfer_id = (orjson.loads(keys or "[]") or [row.transaction_id])[0]
    return Target(row.transaction_id, row.msg_id, transfer_id, row.state)


def attack(broker_url: str, keys: DemoKeys, target: Target) -> list[Attempt]:
    """Every probe, then the replay, each on its own; a request that gets no answer is recorded
    as such (and is not what was expected)."""
    with httpx.Client(base_url=broker_url, timeout=10) as client:
        attempts = [_try(client, probe, _signer(probe.signer, keys), target) for probe in PROBES]
        attempts.append(_replay(client, keys))
    return attempts


def _signer(name: str, keys: DemoKeys) -> Credentials | None:
    if name == UNKNOWN_KEY:
        return Credentials(UNKNOWN_ACCESS_KEY, new_secret())
    if name == GUESSED_SECRET:
        return Credentials(keys.bob.access_key, new_secret())
    return keys.outsider if name == ITSELF else None


def _try(client: httpx.Client, probe: Probe, signer: Credentials | None, target: Target) -> Attempt:
    auth = None if signer is None else HalfmqAuth(signer)
    try:
        response = client.request(
            probe.method, probe.url(target), json=probe.body, params=probe.params, auth=auth
        )
    except httpx.HTTPError as exc:
        return _attempt(probe, None, f"no answer: {type(exc).__name__}")
    return _attempt(probe, response)


def _replay(client: httpx.Client, keys: DemoKeys) -> Attempt:
    """Bob's own request, signed with Bob's keys, goes to the broker; the outsider, who saw it on
    the wire, sends the very same bytes and headers again."""
    probe = Probe("replay", "replay a request of Bob's sniffed off the wire",
                  "GET", REPLAY_PATH, "Bob's signature", 401, "NONCE_REPLAYED")  # fmt: skip
    request = client.build_request(probe.method, probe.path)
    path, _, query = request.url.raw_path.decode("ascii").partition("?")
    request.headers.update(sign_headers(keys.bob, request.method, path, query, request.content))
    sniffed = httpx.Request(request.method, request.url, headers=request.headers, content=b"")
    try:
        original = client.send(request, auth=None)
        replayed = client.send(sniffed, auth=None)
    except httpx.HTTPError as exc:
        return _attempt(probe, None, f"no answer: {type(exc).__name__}")
    return _attempt(probe, replayed, f"Bob's own request: {original.status_code}")


def _attempt(probe: Probe, response: httpx.Response | None, note: str = "") -> Attempt:
    status = None if response is None else response.status_code
    code = None if response is None else _error_code(response)
    request = f"{probe.method} {probe.path}"
    return Attempt(
        probe.key, probe.what, request, probe.expected_status, probe.expected_code, status, code,
        note,
    )  # fmt: skip


def _error_code(response: httpx.Response) -> str | None:
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


def run_outsider(broker_url: str, broker_db: str, keys: DemoKeys) -> OutsiderReport:
    """Find Bob's transaction and attack it.  Never raises for the broker's answers: the report
    holds what happened, and the invariant judges it."""
    target = find_target(broker_db)
    if target is None:
        return OutsiderReport(None, note="no transaction of bob-bank to attack yet")
    return OutsiderReport(target, attack(broker_url, keys, target))


def outsider_invariant(
    report: OutsiderReport | None, bob: BankView, broker: BrokerView
) -> Invariant:
    """Every attempt refused with its documented status and code, and the attacked transaction
    ended as Bob decided: committed and debited at Bob, or rolled back and not debited."""
    name = "every outsider attempt was refused"
    if report is None or report.target is None:
        why = "the outsider did not run" if report is None else report.note
        return Invariant(name, False, why)
    target = report.target
    state, _ = broker.states.get(target.transfer_id, ("UNKNOWN", None))
    debited = target.transfer_id in bob.entries
    as_bob_decided = (state == "COMMITTED" and debited) or (state == "ROLLED_BACK" and not debited)
    unexpected = report.unexpected
    numbers = f"{report.summary()}, {len(report.attempts) - len(unexpected)} with the expected code"
    if unexpected:
        numbers += "; unexpected: " + ", ".join(
            f"{a.key} got {a.status} {a.code or ''}".rstrip() for a in unexpected
        )
    numbers += (
        f"; the attacked transfer {target.transfer_id} ended {state}, "
        f"{'debited' if debited else 'not debited'} at Bob"
    )
    ok = bool(report.attempts) and not unexpected and as_bob_decided
    return Invariant(name, ok, numbers)
