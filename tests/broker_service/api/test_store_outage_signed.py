"""Signed requests while the broker's PostgreSQL is unreachable (issue 29, item 3).

A real broker process, ACL on, talks to the machine's PostgreSQL through a TCP relay
(:mod:`tests.outage_proxy`); cutting the relay is the outage.  Every signed GET of the route
table answers a clean 503 ``STORE_UNAVAILABLE`` envelope while the store is down -- no 500, no
connection reset, whether the route reads the store or not: its nonce cannot be remembered, so
the request is refused before its response starts -- and the same requests answer as before once
the store is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from broker_service.api.permissions import RULES, public
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
    """Every signed GET route of the table (the console's take a session, not a signature), its
    parameters filled: producer-group routes name the producer group."""
    paths = []
    for (method, path), rule in RULES.items():
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
        paths = signed_gets(_seed(client))
        assert len(paths) >= 20
        before = {path: client.get(path).status_code for path in paths}
        assert all(status < 400 for status in before.values()), {
            p: s for p, s in before.items() if s >= 400
        }

        proxy.cut()
        answers: dict[str, tuple[int, str]] = {}
        for path in paths:
            try:
                response = client.get(path)
            except httpx.TransportError as exc:  # a reset connection: what this test forbids
                answers[path] = (0, f"{type(exc).__name__}: {exc}")
                continue
            code = response.json().get("error", {}).get("code") if _is_json(response) else None
            answers[path] = (response.status_code, str(code))
        wrong = {p: a for p, a in answers.items() if a != (503, "STORE_UNAVAILABLE")}
        assert not wrong, "\n".join(f"{path}: {answer}" for path, answer in wrong.items())

        proxy.restore()
        probe = paths[0]
        wait_until(lambda: client.get(probe).status_code == before[probe], 60, "the store back")
        after = {path: client.get(path).status_code for path in paths}
        assert after == before
    log = acl_broker.log_path.read_text()
    assert "response already started" not in log
    assert "Traceback" not in log


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")
