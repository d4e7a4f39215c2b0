"""The complete trace and the check audit as the domain writes them (issue 16), on both stores, on a
clock the test moves: CHECKED for a round that found no live instance and for a pull check
answered, who decided, RESUMED and the operator's actions, the clients' reports, why a
transaction is or is not due, and the ``trace`` setting off."""

from __future__ import annotations

import pytest

from broker_service.domain.config import CheckPolicy, ConsumerConfig, DomainConfig
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.consumers.trace import ClientTraceRecord
from broker_service.domain.consumers.wakeup import Arrivals
from broker_service.domain.errors import Forbidden
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import Store
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import CheckDue, Decision, ResolvedBy
from broker_service.domain.transactions.service import TransactionService
from tests.unit.broker_service.domain.conftest import Clock, Domain

TIMEOUT_MS = 6000  # DomainConfig's transaction_timeout_ms
INTERVAL_MS = 30_000  # CheckPolicy's interval_ms


def _domain(store: Store, *, trace: bool) -> Domain:
    clock = Clock()
    sender = Sender(DomainConfig(), clock=clock)
    policy = CheckPolicy(broker_id="broker-a", trace=trace)
    return Domain(
        clock,
        MessageService(store, sender),
        TransactionService(store, sender, CheckBack(policy, clock)),
        ConsumerService(store, ConsumerConfig(trace=trace), Arrivals(), clock=clock),
    )


@pytest.fixture
def domain(any_store: Store) -> Domain:
    return _domain(any_store, trace=True)


async def _half(domain: Domain) -> tuple[str, str]:
    await domain.messages.create_topic("transfers", 1, False)
    receipt = await domain.transactions.prepare("transfers", MessageDraft(b"t"), "bob", None)
    return receipt.transaction_id, receipt.msg_id


async def _events(domain: Domain, msg_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.by) for e in await domain.consumers.trace(msg_id)]


async def test_a_round_with_no_live_instance_and_a_pull_answer_are_both_checked(
    domain: Domain,
) -> None:
    txid, msg_id = await _half(domain)
    audit = await domain.transactions.checks(txid)
    assert (audit.due, audit.until) == (CheckDue.IMMUNE, domain.clock.now + TIMEOUT_MS)

    domain.clock.advance(TIMEOUT_MS)
    assert (await domain.transactions.claim_round(10)).skipped_no_producer == [txid]
    audit = await domain.transactions.checks(txid)
    assert audit.due is CheckDue.NO_LIVE_INSTANCE
    (nobody,) = audit.checks
    assert (nobody.instance, nobody.failure, nobody.mode) == ("broker-a", "no_live_instance", None)

    await domain.transactions.heartbeat("bob", "bob-pull", None, ["transfers"])
    domain.clock.advance(INTERVAL_MS)
    assert (await domain.transactions.checks(txid)).due is CheckDue.DUE
    report = await domain.transactions.claim_round(10)
    assert report.pull_assigned == {("bob", "bob-pull"): 1}
    audit = await domain.transactions.checks(txid)
    assert (audit.due, audit.claimed_by) == (CheckDue.CLAIMED, "broker-a")
    assert audit.until is not None
    assert audit.until > domain.clock.now

    (_check,) = await domain.transactions.pull_checks("bob", "bob-pull", 10)
    domain.clock.advance(120)
    resolving = Resolving(txid, Decision.COMMIT, "bob", ResolvedBy.CHECK, pull_answer=True)
    resolution = await domain.transactions.resolve(resolving)
    assert resolution.check_latency_ms == 120

    audit = await domain.transactions.checks(txid)
    assert audit.due is CheckDue.RESOLVED
    answered = audit.checks[-1]
    assert (answered.mode, answered.instance, answered.answer, answered.latency_ms) == (
        "pull",
        "bob-pull",
        "COMMIT",
        120,
    )
    assert answered.check_times == 1
    events = await _events(domain, msg_id)
    assert ("CHECKED", "bob-pull") in events
    assert ("COMMITTED", "bob-pull") in events, "the instance that answered decided it"


async def test_a_producer_commit_writes_no_trace_row_and_names_its_group(domain: Domain) -> None:
    txid, msg_id = await _half(domain)
    await domain.transactions.resolve(Resolving(txid, Decision.COMMIT, "bob", ResolvedBy.PRODUCER))
    assert await domain.transactions.store.read(lambda tx: tx.trace_events_of(msg_id)) == []
    (committed,) = [e for e in await domain.consumers.trace(msg_id) if e.event == "COMMITTED"]
    assert committed.by == "producer"
    assert committed.detail == {"resolved_by": "producer", "producer_group": "bob"}


async def test_an_operators_decision_and_resume_name_the_access_key(domain: Domain) -> None:
    txid, msg_id = await _half(domain)
    await domain.messages.delete_topic("transfers")
    domain.clock.advance(TIMEOUT_MS)
    assert (await domain.transactions.claim_round(10)).discarded == [(txid, "TOPIC_DELETED")]
    assert (await domain.transactions.checks(txid)).due is CheckDue.DISCARDED

    await domain.transactions.check_now(txid, "ops-key")
    events = await _events(domain, msg_id)
    assert events == [
        ("HALF_STORED", "bob"),
        ("DISCARDED", "broker"),
        ("OPERATOR_CHECK", "ops-key"),
        ("RESUMED", "ops-key"),
    ]
    assert (await domain.transactions.checks(txid)).due is CheckDue.NO_LIVE_INSTANCE

    resolving = Resolving(txid, Decision.ROLLBACK, None, ResolvedBy.OPERATOR, actor="ops-key")
    await domain.transactions.resolve(resolving)
    trace = await domain.consumers.trace(msg_id)
    (action,) = [e for e in trace if e.event == "OPERATOR_ROLLBACK"]
    assert (action.by, action.detail["state"]) == ("ops-key", "DISCARDED")
    assert [e.by for e in trace if e.event == "ROLLED_BACK"] == ["operator"]


async def test_client_reports_are_recorded_each_on_its_own(domain: Domain) -> None:
    _, msg_id = await _half(domain)
    at = domain.clock.now

    def report(msg: str, kind: str = "PUB") -> ClientTraceRecord:
        return ClientTraceRecord(msg, kind, "transfers", "bob", "bob-1", at, 1.5, "OK")  # type: ignore[arg-type]

    asked: list[tuple[str, str, str]] = []

    def may_report(kind: str, topic: str, group: str) -> None:
        asked.append((kind, topic, group))
        if kind == "SUB":
            raise Forbidden("no SUB", code="PERMISSION_DENIED")

    answer = await domain.consumers.record_client_trace(
        [report(msg_id), report("nope"), report(msg_id, "SUB")], may_report
    )
    assert answer.recorded == 1
    assert [(r.index, r.code) for r in answer.refused] == [
        (1, "MESSAGE_NOT_FOUND"),
        (2, "PERMISSION_DENIED"),
    ]
    assert asked == [("PUB", "transfers", "bob"), ("SUB", "transfers", "bob")]
    (pub,) = [e for e in await domain.consumers.trace(msg_id) if e.event == "CLIENT_PUB"]
    assert (pub.at, pub.by) == (at, "bob-1")
    assert pub.detail == {"group": "bob", "topic": "transfers", "cost_ms": 1.5, "status": "OK"}


async def test_trace_off_writes_no_event_of_its_own(any_store: Store) -> None:
    domain = _domain(any_store, trace=False)
    txid, msg_id = await _half(domain)
    domain.clock.advance(TIMEOUT_MS)
    await domain.transactions.claim_round(10)  # no live instance: not traced
    await domain.messages.delete_topic("transfers")
    domain.clock.advance(INTERVAL_MS)
    await domain.transactions.claim_round(10)  # discarded: derived from the row
    await domain.transactions.check_now(txid, "ops-key")
    record = ClientTraceRecord(msg_id, "PUB", "transfers", "bob", "bob-1", 0, 1.0, "OK")
    assert (await domain.consumers.record_client_trace([record])).recorded == 0

    events = [event for event, _ in await _events(domain, msg_id)]
    assert "CHECKED" not in events
    assert "RESUMED" not in events
    assert "CLIENT_PUB" not in events
    assert events == ["HALF_STORED", "DISCARDED", "OPERATOR_CHECK"], "derived and audit stay"
    assert (await domain.transactions.checks(txid)).checks == []
