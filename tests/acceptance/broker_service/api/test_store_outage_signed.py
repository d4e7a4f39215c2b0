"""Signed requests while the broker's PostgreSQL is unreachable (issue 29, item 3).

A real broker process, ACL on, talks to the machine's PostgreSQL through a TCP relay
(:mod:`tests.outage_proxy`); cutting the relay is the outage.  Every signed GET of the route
table answers a clean 503 ``STORE_UNAVAILABLE`` envelope while the store is down -- no 500, no
connection reset, whether the route reads the store or not: its nonce cannot be remembered, so
the request is refused before its response starts -- and so do signed writes, each error with a
reference (item 4); the same requests answer as before once the store is back, the writes
included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from broker_service.api.permissions import RouteRules, public
from broker_service.app import build_app
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from framework.signing import HalfmqAuth
from tests.outage_proxy import OutageProxy
from tests.support import ACL, OPERATOR, BrokerProcess, free_port, wait_until


@pytest.fixture
def relay(pg_url: str) -> Iterator[tuple[str, OutageProxy]]:
    """The test's schema migrated, and its URL through a relay to the same server."""
    migrate.upgrade(pg_url)
    target = urlsplit(pg_url)
    assert target.hostname is not None
    assert target.port is not None
    with OutageProxy((target.hostname, target.port)) as proxy:
        yield (
            pg_url.replace(f"@{target.hostname}:{target.port}/", f"@127.0.0.1:{proxy.port}/"),
            proxy,
        )


@pytest.fixture
def acl_broker(relay: tuple[str, OutageProxy], tmp_path: Path) -> Iterator[BrokerProcess]:
    url, _ = relay
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    process = BrokerProcess(url, free_port(), tmp_path / "broker.log", "--acl", str(acl))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _client(broker: BrokerProcess) -> httpx.Client:
    return httpx.Client(base_url=broker.url, auth=HalfmqAuth(OPERATOR), timeout=30)


def _seed(client: httpx.Client) -> dict[str, str]:
    """A topic, a consumer group, a half and a message: the path parameters of the GET routes."""
    assert client.post("/v1/topics", json={"name": "transfers", "queues": 2}).status_code == 201
    sent = client.post("/v1/topics/transfers/messages", json={"body": "100"})
    assert sent.status_code == 201, sent.text
    group = client.post("/v1/consumer-groups", json={"name": "smith-bank"})
    assert group.status_code == 201, group.text
    half = client.post(
        "/v1/transactions",
        json={"topic": "transfers", "producer_group": "bob-bank", "body": "200"},
    )
    assert half.status_code == 201, half.text
    return {
        "topic": "transfers",
        "group": "smith-bank",
        "transaction_id": half.json()["transaction_id"],
        "msg_id": sent.json()["msg_id"],
    }


_QUERIES = {
    "/v1/messages": "?topic=transfers",
    "/v1/transactions": "?producer_group=bob-bank",
    "/v1/producer-groups/{group}/checks": "?client_id=bob-1&wait_seconds=0",
}


def signed_gets(params: dict[str, str]) -> list[str]:
    """Every signed GET route of the gate's table, built from the broker's routes as the broker
    builds it (the console's take a session, not a signature), its parameters filled:
    producer-group routes name the producer group."""
    app = build_app(BrokerSettings(database_url="sqlite:///unopened.db", console=True))
    paths = []
    for (method, path), rule in RouteRules.of(app.routes).rules.items():
        if method != "GET" or rule is public or path.startswith("/console"):
            continue
        values = {**params, "group": "bob-bank"} if "producer-groups" in path else params
        filled = path.format(**values)
        paths.append(filled + _QUERIES.get(path, ""))
    return paths


def test_every_signed_get_answers_503_during_an_outage_and_works_again_after(
    relay: tuple[str, OutageProxy], acl_broker: BrokerProcess
) -> None:
    _, proxy = relay
    with _client(acl_broker) as client:
        params = _seed(client)
        paths = signed_gets(params)
        assert len(paths) >= 20
        before = {path: client.get(path).status_code for path in paths}
        assert all(status < 400 for status in before.values()), {
            p: s for p, s in before.items() if s >= 400
        }

        proxy.cut()
        requests = [("GET", path, None) for path in paths] + _writes(params)
        answers = {f"{method} {path}": _answer(client, method, path, body)
                   for method, path, body in requests}  # fmt: skip
        wrong = {p: a for p, a in answers.items() if a != (503, "STORE_UNAVAILABLE", True)}
        assert not wrong, "\n".join(f"{path}: {answer}" for path, answer in wrong.items())

        proxy.restore()
        probe = paths[0]
        wait_until(lambda: client.get(probe).status_code == before[probe], 60, "the store back")
        after = {path: client.get(path).status_code for path in paths}
        assert after == before
        for method, path, body in _writes(params):  # refused whole: none took effect
            response = client.request(method, path, json=body)
            assert response.status_code in (200, 201), (path, response.text)
    log = acl_broker.log_path.read_text()
    assert "response already started" not in log
    assert "Traceback" not in log


def _writes(params: dict[str, str]) -> list[tuple[str, str, dict[str, object]]]:
    """Signed writes: a send, a half, a commit, a batch of halves, a heartbeat."""
    half = {"topic": "transfers", "producer_group": "bob-bank", "body": "300"}
    return [
        ("POST", "/v1/topics/transfers/messages", {"body": "400"}),
        ("POST", "/v1/transactions", half),
        ("POST", f"/v1/transactions/{params['transaction_id']}/commit",
         {"producer_group": "bob-bank"}),
        ("POST", "/v1/transactions:batch", {"halves": [half]}),
        ("POST", "/v1/producer-groups/bob-bank/heartbeat", {"client_id": "bob-1"}),
    ]  # fmt: skip


def _answer(client: httpx.Client, method: str, path: str, body: object) -> tuple[int, str, bool]:
    """(status, error code, whether the error names a reference); status 0: the connection was
    reset -- what this test forbids."""
    try:
        response = client.request(method, path, json=body)
    except httpx.TransportError as exc:
        return 0, f"{type(exc).__name__}: {exc}", False
    if not _is_json(response):
        return response.status_code, response.text[:80], False
    error = response.json().get("error", {})
    return response.status_code, str(error.get("code")), "reference" in error.get("detail", {})


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")
