"""Several brokers on one PostgreSQL: the parts the many-brokers test and bench share.

Used by ``tests/acceptance/broker_service/store/test_many_brokers.py`` and ``bench/brokers_bench.py``:

* :class:`Fleet` -- brokers as real processes (:class:`~halfmq.broker_process.BrokerProcess`) on
  one database, each with its own ``broker_id`` (``b0``, ``b1``, ...: the name its check-back
  claims carry in ``transactions.claimed_by``), and SIGKILL by PID;
* :class:`CheckEndpoint` -- the producer group's real check endpoint: a framework
  :class:`~framework.TransactionProducer` in push mode with its built-in check server, answering
  each check from the half's body (``commit-...`` or ``rollback-...``) and logging every check it
  was asked, with when it began and ended; it can hold its answers (:meth:`CheckEndpoint.hold`),
  so that a test knows the brokers' pushes are in flight;
* :func:`audit` -- what the store's own records say of a set of halves: their states, op records
  and real messages (resolved twice?), and the ``CHECKED`` trace events the brokers wrote (checked
  twice at once?); :func:`claims_of` -- the halves a broker holds claimed.

Why claims expire: a broker claims a due half by moving its ``next_check_at`` (and
``claimed_until``) past the check's time-out in the transaction that selects it, so no other
broker sees it due; a push claim is held for ``transaction_check_interval_seconds`` plus twice
``check_timeout_seconds`` (``CheckBack._dispatch``).  A broker that dies holding claims leaves
them to expire; the next round of any other broker then claims and checks those halves again.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from sqlalchemy import Connection, create_engine, select

from broker_service.domain.names import OP_HALF_TOPIC
from broker_service.store.schema import messages, trace_events, transactions
from drills.pg_cluster import free_port
from framework import LocalTransactionState, Message, TransactionProducer
from framework.config import CheckMode
from halfmq.broker_process import BrokerProcess, process_cpu_seconds

TOPIC = "many"
GROUP = "many-producers"
COMMIT_BODY = "commit"
ROLLBACK_BODY = "rollback"
_HOLD_MAX = 10.0  # seconds a held check waits at most, so a forgotten hold never hangs a run


# -- the brokers' settings ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckTimes:
    """The check-back timing the brokers run with: the round interval, the push time-out, and
    how long after its creation a half with no decision is due."""

    interval: float
    timeout: float
    transaction_timeout: float

    @property
    def claim_expiry(self) -> float:
        """Seconds a push claim is held: what a dead broker's claims take to expire."""
        return self.interval + 2 * self.timeout

    def env(self) -> dict[str, str]:
        return {
            "HALFMQ_TRANSACTION_CHECK_INTERVAL_SECONDS": str(self.interval),
            "HALFMQ_CHECK_TIMEOUT_SECONDS": str(self.timeout),
            "HALFMQ_TRANSACTION_TIMEOUT_SECONDS": str(self.transaction_timeout),
            "HALFMQ_BROKER_BEAT_SECONDS": "2",
        }


# -- brokers as processes -------------------------------------------------------------------------


class Fleet:
    """``count`` brokers on one database, ``b0`` ... ``b{count-1}``, started together."""

    def __init__(self, database_url: str, count: int, workdir: Path, times: CheckTimes) -> None:
        self.brokers = [
            BrokerProcess(
                database_url, free_port(), workdir / f"b{n}.log", env=times.env(), broker_id=f"b{n}"
            )
            for n in range(count)
        ]

    @property
    def urls(self) -> list[str]:
        return [broker.url for broker in self.brokers]

    def start(self, timeout: float = 60) -> None:
        """Start every broker at once (their start-ups overlap), then wait for each."""
        for broker in self.brokers:
            broker.start_unready()
        for broker in self.brokers:
            broker.wait_ready(timeout)

    def rotated(self, first: int) -> list[str]:
        """The broker list starting at broker ``first``: a client sticks to the first broker that
        answers, so clients given different rotations spread over the brokers and each still
        fails over to the others."""
        urls = self.urls
        return urls[first:] + urls[:first]

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop(grace=15)


def postgres_cpu_seconds() -> float:
    """CPU of the machine's PostgreSQL server, whoever its clients: every live ``postgres``
    process, and the backends that already exited (counted in the postmaster's reaped
    children's time), so the figure only grows as connections come and go."""
    total = 0.0
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "postgres":
                    stat = (entry / "stat").read_text()
                    parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    for pid, parent in parents.items():
        total += process_cpu_seconds(pid, reaped=parent not in parents)
    return total


# -- the check endpoint ---------------------------------------------------------------------------


def expected_state(body: str) -> str:
    """The state a half must end in: its body says what the producer's database holds."""
    return "COMMITTED" if body.startswith(COMMIT_BODY) else "ROLLED_BACK"


@dataclass(frozen=True, slots=True)
class CheckCall:
    """One check the endpoint was asked: the half, and when it began and ended (epoch seconds)."""

    transaction_id: str
    began: float
    ended: float


class CheckEndpoint:
    """The producer group's check endpoint: a framework producer in push mode (its built-in
    server), answering from the half's body, logging every check it is asked.

    The same producer sends halves (:meth:`send_unknown`): its local transaction answers UNKNOW,
    so each half is left to the check-back of whichever broker claims it."""

    def __init__(self, brokers: Sequence[str], *, client_id: str = "checker") -> None:
        self.producer = TransactionProducer(
            GROUP, brokers=brokers, client_id=client_id, check=CheckMode.push()
        )
        self.calls: list[CheckCall] = []
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        self.producer.execute_local_transaction(TOPIC)(self._local)
        self.producer.check_local_transaction(TOPIC)(self._check)

    def start(self) -> str:
        url = self.producer.serve_checks("127.0.0.1", 0)
        self.producer.start()
        return url

    def shutdown(self) -> None:
        self._open.set()
        self.producer.shutdown()

    @staticmethod
    def _local(message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def _check(self, message: Message) -> LocalTransactionState:
        began = time.time()
        self._open.wait(_HOLD_MAX)
        state = expected_state(message.text)
        with self._lock:
            self.calls.append(CheckCall(str(message.transaction_id), began, time.time()))
        if state == "COMMITTED":
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE

    def hold(self) -> None:
        """Hold every answer until :meth:`release`: the brokers' pushes stay in flight (and their
        claims held) meanwhile -- a slow producer database, on demand."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def send_unknown(self, n: int) -> str:
        """One half left to the check-back; returns its transaction id (raises if it was never
        acknowledged).  Every third rolls back when checked."""
        body = f"{ROLLBACK_BODY if n % 3 == 2 else COMMIT_BODY}-{n}"
        result = self.producer.send_message_in_transaction(Message(TOPIC, body=body))
        return str(result.transaction_id)

    def snapshot(self) -> list[CheckCall]:
        with self._lock:
            return list(self.calls)


# -- what the store says --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval:
    """One check of a half as a span of time (epoch ms): from its start to its end."""

    begin: float
    end: float


@dataclass
class Audit:
    """The store's records of a set of halves, counted.

    ``resolved_twice``: more than one op record, or (committed) more than one real message, or
    (rolled back) any; ``checked_at_once``: two of its checks overlapped in time (only two brokers
    holding one half's claim at once can do that); ``checked_again``: more than one check answered
    COMMIT or ROLLBACK (a broker died after asking, before resolving); ``check_failed``: a check
    got no answer in time (the half is rightly asked again); ``wrong``: resolved otherwise than the
    producer's database says; ``unresolved``: still PREPARED (or DISCARDED), or missing."""

    halves: int = 0
    states: Counter[str] = field(default_factory=Counter)
    resolved_by: Counter[str] = field(default_factory=Counter)
    unresolved: list[str] = field(default_factory=list)
    resolved_twice: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    checked_at_once: list[str] = field(default_factory=list)
    checked_again: list[str] = field(default_factory=list)
    check_failed: list[str] = field(default_factory=list)  # a check timed out or erred: asked again
    checks: int = 0  # CHECKED events (each a check that reached the endpoint, or failed)
    first_check_ms: float | None = None  # the first check's start
    last_resolved_ms: int | None = None
    resolved_at: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.unresolved or self.resolved_twice or self.wrong or self.checked_at_once)


def overlapping(spans: Iterable[Interval]) -> bool:
    """Whether any two spans overlap."""
    ordered = sorted(spans, key=lambda s: s.begin)
    return any(later.begin < earlier.end for earlier, later in itertools.pairwise(ordered))


def audit(url: str, transaction_ids: Iterable[str]) -> Audit:
    """Count what the store holds for these halves (see :class:`Audit`)."""
    wanted = set(transaction_ids)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            records = {
                r.transaction_id: r
                for r in conn.execute(select(transactions))
                if r.transaction_id in wanted
            }
            ops: Counter[str] = Counter()
            real: Counter[str] = Counter()
            bodies: dict[str, str] = {}
            for row in conn.execute(
                select(messages.c.transaction_id, messages.c.topic, messages.c.body).where(
                    messages.c.transaction_id.is_not(None)
                )
            ):
                if row.transaction_id not in wanted:
                    continue
                if row.topic == OP_HALF_TOPIC:
                    ops[row.transaction_id] += 1
                elif row.topic == "RMQ_SYS_TRANS_HALF_TOPIC":
                    bodies[row.transaction_id] = bytes(row.body).decode()
                elif not row.topic.startswith("RMQ_SYS_"):
                    real[row.transaction_id] += 1
            checks = _checks(conn, {r.msg_id for r in records.values()})
    finally:
        engine.dispose()
    result = Audit(halves=len(wanted))
    for txid in sorted(wanted):
        record = records.get(txid)
        if record is None:
            result.unresolved.append(txid)
            continue
        result.states[record.state] += 1
        result.resolved_by[record.resolved_by or "-"] += 1
        if record.state not in ("COMMITTED", "ROLLED_BACK"):
            result.unresolved.append(txid)
            continue
        result.resolved_at[txid] = int(record.resolved_at)
        want_real = 1 if record.state == "COMMITTED" else 0
        if ops[txid] != 1 or real[txid] != want_real:
            result.resolved_twice.append(txid)
        if txid in bodies and record.state != expected_state(bodies[txid]):
            result.wrong.append(txid)
        half = checks.get(txid, HalfChecks())
        result.checks += len(half.spans)
        if overlapping(half.spans):
            result.checked_at_once.append(txid)
        if half.answered > 1:
            result.checked_again.append(txid)
        if half.failed:
            result.check_failed.append(txid)
        for span in half.spans:
            if result.first_check_ms is None or span.begin < result.first_check_ms:
                result.first_check_ms = span.begin
    if result.resolved_at:
        result.last_resolved_ms = max(result.resolved_at.values())
    return result


@dataclass
class HalfChecks:
    """One half's checks, from the brokers' ``CHECKED`` events: each push's span (the event's
    time, when the broker recorded the outcome, back by the push's latency), how many were
    answered with a decision, how many failed (no answer in time, an error status)."""

    spans: list[Interval] = field(default_factory=list)
    answered: int = 0
    failed: int = 0


def _checks(conn: Connection, msg_ids: set[str]) -> dict[str, HalfChecks]:
    found: dict[str, HalfChecks] = defaultdict(HalfChecks)
    query = select(trace_events.c.msg_id, trace_events.c.at, trace_events.c.detail).where(
        trace_events.c.event == "CHECKED"
    )
    for row in conn.execute(query):
        if row.msg_id not in msg_ids or row.detail is None:
            continue
        detail = orjson.loads(row.detail)
        half = found[str(detail.get("transaction_id"))]
        latency = detail.get("latency_ms")
        if latency is not None:
            half.spans.append(Interval(row.at - latency, row.at))
        if detail.get("answer") in ("COMMIT", "ROLLBACK"):
            half.answered += 1
        if detail.get("failure") is not None:
            half.failed += 1
    return found


def claims_of(url: str, broker_id: str) -> dict[str, int]:
    """The open halves ``broker_id`` holds claimed: transaction id -> when the claim expires."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(transactions.c.transaction_id, transactions.c.claimed_until).where(
                transactions.c.claimed_by == broker_id,
                transactions.c.state.in_(("PREPARED", "DISCARDED")),
            )
            return {r.transaction_id: int(r.claimed_until) for r in conn.execute(query)}
    finally:
        engine.dispose()


def endpoint_overlaps(calls: Iterable[CheckCall]) -> tuple[list[str], list[str]]:
    """From the check endpoint's own log: the halves two of whose checks overlapped, and those
    checked more than once."""
    by_half: dict[str, list[Interval]] = defaultdict(list)
    for call in calls:
        by_half[call.transaction_id].append(Interval(call.began, call.ended))
    at_once = sorted(txid for txid, spans in by_half.items() if overlapping(spans))
    again = sorted(txid for txid, spans in by_half.items() if len(spans) > 1)
    return at_once, again
