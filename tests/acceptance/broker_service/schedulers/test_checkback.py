"""Check-back with real processes: a broker, producers killed with SIGKILL, new instances that
answer checks from their own local database -- push and pull, on both stores."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from broker_service.store.schema import messages
from tests.acceptance.broker_service.schedulers.helpers import (
    StartBroker,
    answered_checks,
    create_topic,
    transaction_of,
)
from tests.store_check import assert_transactions_consistent, rows
from tests.support import BrokerProcess, Program, free_port, wait_until

pytestmark = pytest.mark.slow

FAST = (
    "--transaction-timeout-seconds", "0.5",
    "--transaction-check-interval-seconds", "0.3",
    "--producer-expiry-seconds", "3",
    "--check-timeout-seconds", "3",
)  # fmt: skip


@pytest.fixture
def broker_flags() -> tuple[str, ...]:
    return FAST


@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize(("effect", "expected"), [("yes", "COMMITTED"), ("no", "ROLLED_BACK")])
def test_killed_producer_is_resolved_by_a_new_instance(
    start_broker: StartBroker,
    programs: list[Program],
    tmp_path: Path,
    mode: str,
    effect: str,
    expected: str,
) -> None:
    broker = start_broker()
    create_topic(broker)
    local = tmp_path / "bob.db"
    doomed = Program("tests.producer_app", "half", broker.url, "bob", str(local), "t-1",
                     "--effect", effect)  # fmt: skip
    programs.append(doomed)
    txid = doomed.first_line()
    doomed.kill()  # after the local transaction, before any commit or rollback
    assert transaction_of(broker, txid)["state"] == "PREPARED"

    successor = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                        "--mode", mode)  # fmt: skip
    programs.append(successor)
    successor.first_line()
    wait_until(
        lambda: transaction_of(broker, txid)["state"] != "PREPARED", 30, "the check to resolve"
    )
    state = transaction_of(broker, txid)
    assert state["state"] == expected
    assert state["resolved_by"] == "check"
    assert state["check_times"] == 1
    real = rows(broker.database_url, messages, messages.c.transaction_id == txid,
                messages.c.topic == "transfers")  # fmt: skip
    assert len(real) == (1 if expected == "COMMITTED" else 0)
    assert_transactions_consistent(broker.database_url)


def test_unknown_answers_discard_after_check_max_then_a_late_commit_resolves(
    start_broker: StartBroker, programs: list[Program], tmp_path: Path
) -> None:
    broker = start_broker("--transaction-check-max", "3")
    create_topic(broker)
    local = tmp_path / "bob.db"
    doomed = Program("tests.producer_app", "half", broker.url, "bob", str(local), "t-1",
                     "--effect", "yes")  # fmt: skip
    programs.append(doomed)
    txid = doomed.first_line()
    doomed.kill()
    unsure = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                     "--mode", "push", "--answer", "UNKNOWN")  # fmt: skip
    programs.append(unsure)
    unsure.first_line()
    wait_until(lambda: transaction_of(broker, txid)["state"] == "DISCARDED", 30, "DISCARDED")
    state = transaction_of(broker, txid)
    assert state["check_times"] == 3
    assert [c[1] for c in answered_checks(local)] == [1, 2, 3]
    discarded = httpx.get(f"{broker.url}/v1/transactions", params={"state": "DISCARDED"}).json()
    assert [t["transaction_id"] for t in discarded["transactions"]] == [txid]
    parked = rows(broker.database_url, messages, messages.c.transaction_id == txid,
                  messages.c.topic == "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC")  # fmt: skip
    assert len(parked) == 1

    late = httpx.post(f"{broker.url}/v1/transactions/{txid}/commit",
                      json={"producer_group": "bob"})  # fmt: skip
    assert late.status_code == 200
    assert transaction_of(broker, txid)["state"] == "COMMITTED"
    assert_transactions_consistent(broker.database_url)


def test_no_live_producer_costs_nothing_until_one_appears(
    start_broker: StartBroker, programs: list[Program], tmp_path: Path
) -> None:
    broker = start_broker("--transaction-check-max", "2")
    create_topic(broker)
    local = tmp_path / "bob.db"
    doomed = Program("tests.producer_app", "half", broker.url, "bob", str(local), "t-1",
                     "--effect", "yes")  # fmt: skip
    programs.append(doomed)
    txid = doomed.first_line()
    doomed.kill()
    httpx.delete(f"{broker.url}/v1/producer-groups/bob")  # its heartbeat is forgotten
    metrics_before = _skipped(broker)
    wait_until(lambda: _skipped(broker) >= metrics_before + 5, 30, "five rounds skipping it")
    state = transaction_of(broker, txid)
    assert state["state"] == "PREPARED"
    assert state["check_times"] == 0

    successor = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                        "--mode", "pull")  # fmt: skip
    programs.append(successor)
    successor.first_line()
    wait_until(lambda: transaction_of(broker, txid)["state"] == "COMMITTED", 30, "the check")
    assert transaction_of(broker, txid)["check_times"] == 1


def _skipped(broker: BrokerProcess) -> float:
    text = httpx.get(f"{broker.url}/metrics").text
    for line in text.splitlines():
        if line.startswith('halfmq_checks_total{outcome="skipped_no_producer"}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize(("producer_says", "check_says"), [("commit", "COMMIT"),
                                                          ("rollback", "COMMIT"),
                                                          ("commit", "ROLLBACK")])  # fmt: skip
def test_a_decision_racing_a_check_in_flight_the_first_stands(
    start_broker: StartBroker,
    programs: list[Program],
    tmp_path: Path,
    producer_says: str,
    check_says: str,
) -> None:
    broker = start_broker()
    create_topic(broker)
    local = tmp_path / "bob.db"
    slow = Program("tests.producer_app", "serve", broker.url, "bob", str(local), "--mode", "push",
                   "--answer", check_says, "--delay", "1.5")  # fmt: skip
    programs.append(slow)
    slow.first_line()
    half = httpx.post(f"{broker.url}/v1/transactions",
                      json={"topic": "transfers", "producer_group": "bob", "body": "x",
                            "keys": ["t-9"]}).json()  # fmt: skip
    txid = half["transaction_id"]
    wait_until(lambda: len(answered_checks(local)) >= 1, 20, "the check to be in flight")
    decided = httpx.post(f"{broker.url}/v1/transactions/{txid}/{producer_says}",
                         json={"producer_group": "bob"})  # fmt: skip
    assert decided.status_code == 200
    expected = "COMMITTED" if producer_says == "commit" else "ROLLED_BACK"
    wait_until(lambda: _answered(broker) >= 1, 20, "the check's answer to arrive")
    state = transaction_of(broker, txid)
    assert state["state"] == expected
    assert state["resolved_by"] == "producer"
    again = httpx.post(f"{broker.url}/v1/transactions/{txid}/{producer_says}",
                       json={"producer_group": "bob"})  # fmt: skip
    assert again.json() == decided.json()
    real = rows(broker.database_url, messages, messages.c.transaction_id == txid,
                messages.c.topic == "transfers")  # fmt: skip
    assert len(real) == (1 if expected == "COMMITTED" else 0)
    assert_transactions_consistent(broker.database_url)


def _answered(broker: BrokerProcess) -> float:
    text = httpx.get(f"{broker.url}/metrics").text
    for line in text.splitlines():
        if line.startswith('halfmq_checks_total{outcome="answered"}'):
            return float(line.split()[-1])
    return 0.0


def test_operator_can_check_a_discarded_transaction_again(
    start_broker: StartBroker, programs: list[Program], tmp_path: Path
) -> None:
    broker = start_broker("--transaction-check-max", "1")
    create_topic(broker)
    local = tmp_path / "bob.db"
    doomed = Program("tests.producer_app", "half", broker.url, "bob", str(local), "t-1",
                     "--effect", "no")  # fmt: skip
    programs.append(doomed)
    txid = doomed.first_line()
    doomed.kill()
    unsure = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                     "--mode", "push", "--answer", "UNKNOWN", "--client-id", "unsure")  # fmt: skip
    programs.append(unsure)
    unsure.first_line()
    wait_until(lambda: transaction_of(broker, txid)["state"] == "DISCARDED", 30, "DISCARDED")
    unsure.kill()
    httpx.delete(f"{broker.url}/v1/producer-groups/bob")
    knowing = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                      "--mode", "push")  # fmt: skip
    programs.append(knowing)
    knowing.first_line()
    assert transaction_of(broker, txid)["state"] == "DISCARDED", (
        "a discarded half is not checked on its own"
    )
    response = httpx.post(f"{broker.url}/v1/transactions/{txid}/check")
    assert response.status_code == 200
    wait_until(
        lambda: transaction_of(broker, txid)["state"] == "ROLLED_BACK", 30, "the operator's check"
    )
    assert transaction_of(broker, txid)["resolved_by"] == "check"


@pytest.fixture
def pg_migrated(pg_url: str) -> str:
    from broker_service.store import migrate

    migrate.upgrade(pg_url)
    return pg_url


async def test_two_brokers_on_postgresql_check_each_due_half_once(
    pg_migrated: str, programs: list[Program], tmp_path: Path
) -> None:
    brokers = [
        BrokerProcess(pg_migrated, free_port(), tmp_path / f"broker-{n}.log", *FAST)
        for n in range(2)
    ]
    for broker in brokers:
        broker.start()
    try:
        async with httpx.AsyncClient(base_url=brokers[0].url, timeout=30) as client:
            await client.post("/v1/topics", json={"name": "transfers", "queues": 4})
            limit = asyncio.Semaphore(50)

            async def half(n: int) -> str:
                async with limit:
                    response = await client.post(
                        "/v1/transactions",
                        json={"topic": "transfers", "producer_group": "bob", "body": str(n),
                              "keys": [f"t-{n}"]},
                    )  # fmt: skip
                    return str(response.json()["transaction_id"])

            txids = await asyncio.gather(*(half(n) for n in range(1000)))
        local = tmp_path / "bob.db"
        answering = Program("tests.producer_app", "serve", brokers[1].url, "bob", str(local),
                            "--mode", "push", "--answer", "COMMIT")  # fmt: skip
        programs.append(answering)
        answering.first_line()

        def committed() -> int:
            listed = httpx.get(
                f"{brokers[0].url}/v1/transactions",
                params={"state": "COMMITTED", "limit": 1000},
                timeout=10,
            ).json()["transactions"]
            return len(listed)

        wait_until(lambda: committed() == 1000, 120, "every half to be checked and committed")
        checks = answered_checks(local)
        per_half = Counter(txid for txid, _times, _client in checks)
        assert set(per_half) == set(txids)
        assert set(per_half.values()) == {1}, "a half was checked twice"
        assert_transactions_consistent(pg_migrated)
    finally:
        for broker in brokers:
            broker.stop()
