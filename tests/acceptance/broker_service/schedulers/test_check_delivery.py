"""A check that never reached a producer costs the half nothing (issue 21): real broker processes,
real producer processes and real sockets, on both stores.

``check_times`` counts a push check only once the producer received it; a refused port, a full
listen backlog or a broker killed between claim and send leave the half PREPARED and uncounted,
and the check goes to another live instance when there is one."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from broker_service.store.schema import messages, transactions
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
    "--check-unreachable-seconds", "0.5",
    "--transaction-check-max", "3",
)  # fmt: skip


@pytest.fixture
def broker_flags() -> tuple[str, ...]:
    return FAST


class Heartbeat:
    """An instance that heartbeats with a callback URL nobody answers (a producer restarting)."""

    def __init__(self, broker: BrokerProcess, group: str, client_id: str, callback: str) -> None:
        self.body = {"client_id": client_id, "callback_url": callback, "topics": ["transfers"]}
        self.url = f"{broker.url}/v1/producer-groups/{group}/heartbeat"
        self._stop = threading.Event()
        httpx.post(self.url, json=self.body, timeout=5).raise_for_status()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(self.url, json=self.body, timeout=5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def heartbeats() -> Iterator[list[Heartbeat]]:
    running: list[Heartbeat] = []
    yield running
    for beat in running:
        beat.stop()


def _half(broker: BrokerProcess, key: str) -> str:
    response = httpx.post(
        f"{broker.url}/v1/transactions",
        json={"topic": "transfers", "producer_group": "bob", "body": key, "keys": [key]},
        timeout=10,
    )
    response.raise_for_status()
    return str(response.json()["transaction_id"])


def _metric(broker: BrokerProcess, outcome: str) -> float:
    text = httpx.get(f"{broker.url}/metrics", timeout=5).text
    prefix = f'halfmq_checks_total{{outcome="{outcome}"}}'
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix)),
                0.0)  # fmt: skip


def _undelivered_halves(broker: BrokerProcess) -> float:
    text = httpx.get(f"{broker.url}/metrics", timeout=5).text
    (line,) = [line for line in text.splitlines() if line.startswith("halfmq_undelivered_halves ")]
    return float(line.split()[-1])


def _refused_url() -> tuple[int, str]:
    port = free_port()
    return port, f"http://127.0.0.1:{port}/check"


def test_a_refused_port_costs_nothing_and_the_producer_coming_up_there_resolves_it(
    start_broker: StartBroker,
    programs: list[Program],
    heartbeats: list[Heartbeat],
    tmp_path: Path,
) -> None:
    broker = start_broker("--check-undelivered-alert-seconds", "2")
    create_topic(broker)
    port, callback = _refused_url()
    heartbeats.append(Heartbeat(broker, "bob", "bob-1", callback))
    txid = _half(broker, "t-1")

    wait_until(lambda: _metric(broker, "undelivered") >= 10, 60, "ten undelivered checks")
    state = transaction_of(broker, txid)
    assert state["state"] == "PREPARED"
    assert state["check_times"] == 0
    assert state["last_checked_at"] is None
    assert "ConnectError" in state["last_check_error"]
    assert state["undelivered_since"] is not None
    wait_until(lambda: _undelivered_halves(broker) == 1, 30, "the half to be reported")
    assert f"checks of transaction {txid} have reached no instance of bob" in (
        broker.log_path.read_text()
    )
    instance = httpx.get(f"{broker.url}/v1/producer-groups/bob", timeout=5).json()["instances"][0]
    assert instance["live"] is True
    assert "ConnectError" in instance["last_error"]

    heartbeats.pop().stop()
    local = tmp_path / "bob.db"
    producer = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                       "--mode", "push", "--answer", "COMMIT", "--client-id", "bob-1",
                       "--port", str(port))  # fmt: skip
    programs.append(producer)
    producer.first_line()
    wait_until(
        lambda: transaction_of(broker, txid)["state"] != "PREPARED", 30, "the check to resolve"
    )
    state = transaction_of(broker, txid)
    assert (state["state"], state["resolved_by"], state["check_times"]) == (
        "COMMITTED",
        "check",
        1,
    )
    assert state["undelivered_since"] is None
    assert answered_checks(local) == [(txid, 1, "bob-1")]
    assert_transactions_consistent(broker.database_url)


def test_two_instances_one_dead_every_check_goes_to_the_live_one(
    start_broker: StartBroker,
    programs: list[Program],
    heartbeats: list[Heartbeat],
    tmp_path: Path,
) -> None:
    broker = start_broker()
    create_topic(broker)
    _port, callback = _refused_url()
    heartbeats.append(Heartbeat(broker, "bob", "dead", callback))
    local = tmp_path / "bob.db"
    live = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                   "--mode", "push", "--answer", "COMMIT", "--client-id", "live")  # fmt: skip
    programs.append(live)
    live.first_line()
    txids = [_half(broker, f"t-{n}") for n in range(20)]

    def resolved() -> bool:
        return all(transaction_of(broker, txid)["state"] == "COMMITTED" for txid in txids)

    wait_until(resolved, 60, "every half to be resolved by the live instance")
    assert {transaction_of(broker, txid)["check_times"] for txid in txids} == {1}
    checks = answered_checks(local)
    assert sorted(txid for txid, _times, _client in checks) == sorted(txids)
    assert {client for _txid, _times, client in checks} == {"live"}
    assert _metric(broker, "undelivered") >= 1, "the dead instance was never tried"
    assert_transactions_consistent(broker.database_url)


def test_a_listen_backlog_of_one_under_a_hundred_simultaneous_checks_loses_none(
    start_broker: StartBroker, programs: list[Program], tmp_path: Path
) -> None:
    broker = start_broker("--check-timeout-seconds", "5")
    create_topic(broker)
    local = tmp_path / "bob.db"
    conn = sqlite3.connect(local)
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY)")
    txids = {}
    for n in range(100):  # the local transaction ran for the even ones only
        key = f"t-{n}"
        txids[key] = _half(broker, key)
        if n % 2 == 0:
            conn.execute("INSERT INTO effects VALUES (?)", (key,))
    conn.commit()
    conn.close()

    producer = Program("tests.producer_app", "serve", broker.url, "bob", str(local),
                       "--mode", "push", "--backlog", "1", "--client-id", "narrow")  # fmt: skip
    programs.append(producer)
    producer.first_line()

    def states() -> Counter[str]:
        return Counter(
            row.state
            for row in rows(
                broker.database_url, transactions, transactions.c.producer_group == "bob"
            )
        )

    wait_until(lambda: states()["PREPARED"] == 0, 120, "every half to be resolved")
    assert states() == Counter({"COMMITTED": 50, "ROLLED_BACK": 50})
    for key, txid in txids.items():
        expected = "COMMITTED" if int(key[2:]) % 2 == 0 else "ROLLED_BACK"
        assert transaction_of(broker, txid)["state"] == expected, key
    assert_transactions_consistent(broker.database_url)


@contextlib.contextmanager
def _black_hole() -> Iterator[str]:
    """A port that completes no new connection: listening, never accepting, its backlog full."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(server.getsockname())
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/check"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_a_broker_killed_between_claim_and_send_does_not_burn_a_check(
    start_broker: StartBroker,
    programs: list[Program],
    heartbeats: list[Heartbeat],
    tmp_path: Path,
) -> None:
    broker = start_broker("--check-timeout-seconds", "5")
    create_topic(broker)
    with _black_hole() as callback:
        heartbeats.append(Heartbeat(broker, "bob", "hung", callback))
        txid = _half(broker, "t-1")
        # claimed, and its push is stuck connecting: the broker dies before the check is sent
        wait_until(lambda: _metric(broker, "sent") >= 1, 30, "the check's push to start")
        broker.kill()
        heartbeats.pop().stop()
    (row,) = rows(broker.database_url, transactions, transactions.c.transaction_id == txid)
    assert (row.state, row.check_times) == ("PREPARED", 0)
    assert row.claimed_by is not None, "the half was claimed before the kill"

    successor = start_broker()
    httpx.delete(f"{successor.url}/v1/producer-groups/bob", timeout=5)
    local = tmp_path / "bob.db"
    producer = Program("tests.producer_app", "serve", successor.url, "bob", str(local),
                       "--mode", "push", "--answer", "ROLLBACK")  # fmt: skip
    programs.append(producer)
    producer.first_line()
    wait_until(
        lambda: transaction_of(successor, txid)["state"] == "ROLLED_BACK", 60, "the claim to expire"
    )
    assert transaction_of(successor, txid)["check_times"] == 1
    assert [times for _txid, times, _client in answered_checks(local)] == [1]
    assert not rows(successor.database_url, messages, messages.c.transaction_id == txid,
                    messages.c.topic == "transfers")  # fmt: skip
