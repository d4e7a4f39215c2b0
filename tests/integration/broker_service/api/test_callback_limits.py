"""Issue 29, item 5: a push check's callback may name neither the broker's own listeners nor its
store, and only the ports ``callback_ports`` lists when it lists any.  The rule's pieces directly
(the domain's ports, the HTTP layer's reading of the settings and of this machine's addresses),
then a real broker process on PostgreSQL over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from broker_service.api.hardening import OwnAddresses, callback_limits, store_listeners
from broker_service.domain.errors import Forbidden, InvalidRequest
from broker_service.domain.transactions.callbacks import (
    ANY_OWN_ADDRESS,
    CallbackLimits,
    CallbackPolicy,
    Listener,
    parse_ports,
)
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from tests.support import BrokerApp, BrokerProcess, check_endpoint, free_port, wait_until

OWN = OwnAddresses("127.0.0.1")
STORE = "postgresql+psycopg://postgres:pw@127.0.0.1:5432/test"


def test_callback_ports_are_ports_and_ranges_and_anything_else_is_named() -> None:
    assert parse_ports(["8080", " 8000-8999 ", "1-1"]) == (
        range(8080, 8081),
        range(8000, 9000),
        range(1, 2),
    )
    assert parse_ports([]) == ()
    for bad in ("0", "65536", "9000-8000", "http", "80-", "-80", "1-2-3", ""):
        with pytest.raises(ValueError, match="bad callback port") as raised:
            parse_ports(["8080", bad])
        assert repr(bad) in str(raised.value)


def test_this_machines_addresses_are_its_own_and_others_are_not() -> None:
    for own in ("127.0.0.1", "127.0.0.9", "::1", "::ffff:127.0.0.1", "0.0.0.0", "localhost"):
        assert OWN(own), own
    for other in ("192.0.2.1", "2001:db8::1", "db.example"):  # documentation ranges: nobody's
        assert not OWN(other), other
    assert OwnAddresses("broker.example")("broker.example")  # the name it was told to bind


def test_the_store_listens_where_its_url_says() -> None:
    assert store_listeners("sqlite:///./halfmq.db", OWN) == []
    what = "the broker's store (database_url)"
    assert store_listeners(STORE, OWN) == [Listener(ANY_OWN_ADDRESS, 5432, what)]
    assert store_listeners("postgresql://u@db.example:6543/x", OWN) == [
        Listener("db.example", 6543, what)
    ]
    assert store_listeners("postgresql://u@db.example,[2001:db8::7]:5433/x", OWN) == [
        Listener("db.example", 5432, what),
        Listener("2001:db8::7", 5433, what),
    ]
    unix = "postgresql+psycopg:///x?host=/var/run/postgresql&port=5433"
    assert store_listeners(unix, OWN) == [Listener(ANY_OWN_ADDRESS, 5433, what)]


def test_the_limits_name_the_brokers_listeners_and_its_store() -> None:
    settings = BrokerSettings(
        port=9876, grpc_port=8081, database_url=STORE, callback_ports=["30000-39999"]
    )
    limits = callback_limits(settings, ("127.0.0.1", 9876))
    assert {(listener.host, listener.port) for listener in limits.refused} == {
        (ANY_OWN_ADDRESS, 9876),
        (ANY_OWN_ADDRESS, 8081),
        (ANY_OWN_ADDRESS, 5432),
    }
    assert limits.ports == (range(30000, 40000),)
    zero = callback_limits(BrokerSettings(port=0), ("127.0.0.1", 41234))  # --port 0
    assert [listener.port for listener in zero.refused] == [41234]


def _refusal(policy: CallbackPolicy, url: str, limits: CallbackLimits) -> str:
    with pytest.raises(Forbidden) as raised:
        policy.check(url, "127.0.0.1", limits)
    assert raised.value.code == "CALLBACK_NOT_ALLOWED"
    return raised.value.message


def test_a_callback_port_rule_holds_whatever_host_the_operator_allows() -> None:
    anywhere = CallbackPolicy(["*"])  # callback_hosts: * does not open the broker's own ports
    limits = CallbackLimits(
        refused=(
            Listener(ANY_OWN_ADDRESS, 9876, "the broker's own HTTP port"),
            Listener("db.example", 5432, "the broker's store (database_url)"),
        ),
        ports=(range(8000, 9000), range(9876, 9877)),
        is_own=OWN,
    )
    for url in ("http://127.0.0.1:9876/v1/topics", "http://localhost:9876/", "http://[::1]:9876"):
        assert "the broker's own HTTP port" in _refusal(anywhere, url, limits)
    assert "store" in _refusal(anywhere, "http://DB.example:5432/", limits)
    assert "callback_ports" in _refusal(anywhere, "http://127.0.0.1:7000/check", limits)
    assert "callback_ports" in _refusal(anywhere, "http://127.0.0.1/check", limits)  # 80
    anywhere.check("http://127.0.0.1:8080/check", "127.0.0.1", limits)
    anywhere.check("http://db.example:8443/check", "127.0.0.1", limits)
    # Another machine's port 9876 is not this broker's.
    anywhere.check("http://192.0.2.1:9876/check", "127.0.0.1", limits)
    with pytest.raises(InvalidRequest):
        anywhere.check("http://127.0.0.1:99999/check", "127.0.0.1", limits)


async def test_a_bad_callback_ports_entry_is_a_clear_error_not_a_500(sqlite_url: str) -> None:
    """Refused as the settings load once they check the entry themselves; until then, 503
    ``CALLBACK_PORTS_INVALID`` naming it to each heartbeat that names a callback."""
    migrate.upgrade(sqlite_url)
    refusal = ""
    try:
        BrokerSettings(database_url=sqlite_url, callback_ports=["8000-8999", "70000"])
    except ValueError as exc:  # (pydantic's ValidationError is one)
        refusal = str(exc)
    if refusal:
        assert "'70000'" in refusal
        return
    async with BrokerApp.start(database_url=sqlite_url, callback_ports=["70000"]) as broker:
        answer = await broker.client.post(
            "/v1/producer-groups/bob-bank/heartbeat",
            json={"client_id": "bob-1", "callback_url": "http://127.0.0.1:8080/check"},
        )
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "CALLBACK_PORTS_INVALID"
        assert "'70000'" in error["message"]
        pulling = await broker.client.post(  # a pull-mode instance names no callback: unaffected
            "/v1/producer-groups/bob-bank/heartbeat", json={"client_id": "bob-2"}
        )
        assert pulling.status_code == 200, pulling.text


# -- a real broker on PostgreSQL -------------------------------------------------------------------


def test_a_heartbeat_may_not_aim_checks_at_the_broker_or_its_store(
    pg_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(pg_url)
    broker = BrokerProcess(
        pg_url, free_port(), tmp_path / "broker.log",
        "--callback-ports", "1024-4999,30000-65535",
        "--transaction-timeout-seconds", "0.5", "--transaction-check-interval-seconds", "0.3",
    )  # fmt: skip
    broker.start()
    try:
        with (
            check_endpoint() as (port, seen),
            httpx.Client(base_url=broker.url, timeout=10) as client,
        ):
            assert 30000 <= port <= 65535  # (an ephemeral port: one callback_ports allows)

            def beat(url: str) -> httpx.Response:
                return client.post(
                    "/v1/producer-groups/bob-bank/heartbeat",
                    json={"client_id": "bob-1", "callback_url": url},
                )

            refusals = {
                f"http://127.0.0.1:{broker.port}/v1/topics": "the broker's own HTTP port",
                f"http://localhost:{broker.port}/v1/topics": "the broker's own HTTP port",
                "http://127.0.0.1:5432/": "the broker's store (database_url)",
                "http://127.0.0.1:8080/check": "callback_ports",
            }
            for url, why in refusals.items():
                refused = beat(url)
                assert refused.status_code == 403, (url, refused.text)
                error = refused.json()["error"]
                assert error["code"] == "CALLBACK_NOT_ALLOWED", error
                assert why in error["message"], error
            accepted = beat(f"http://127.0.0.1:{port}/check")
            assert accepted.status_code == 200, accepted.text
            client.post("/v1/topics", json={"name": "transfers", "queues": 1})
            half = client.post(
                "/v1/transactions",
                json={"topic": "transfers", "producer_group": "bob-bank", "body": "debit"},
            )
            assert half.status_code == 201, half.text
            wait_until(lambda: bool(seen), 30, "the check at the accepted callback")
    finally:
        broker.stop()
    assert seen == ["/check"]
