"""A producer with credentials answers only the push checks the broker signed with them, on every
check endpoint: the thread server, the asyncio server (real sockets) and the FastAPI router
(sync and async producers, through httpx's ASGI transport).

Good checks are signed by the broker's own code (``broker_service.acl.signature.sign``, what its
check-back scheduler sends); the bad ones are that, altered.  A refused check is answered 401 in
the broker's error shape and never reaches the producer's checker."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from broker_service.acl.signature import sign
from broker_service.domain.transactions.checkback import CheckRequest, check_payload
from framework import (
    AsyncTransactionProducer,
    CheckMode,
    Credentials,
    LocalTransactionState,
    Message,
    TransactionProducer,
)
from framework.fastapi import check_router
from tests.integration.framework.signed_http import BOB, SMITH, now_ms

NOWHERE = ["http://127.0.0.1:9"]  # the checks come in; nothing is sent to a broker
CHECK = orjson.dumps(
    check_payload(
        CheckRequest(
            transaction_id="tx-1",
            producer_group="bob-bank",
            msg_id="msg-1",
            topic="transfers",
            tags=None,
            keys=("t-1",),
            body=b'{"amount": 100}',
            encoding="utf-8",
            properties={},
            check_times=1,
        )
    )
)
Post = Callable[[str, dict[str, str], bytes], Awaitable[httpx.Response]]


@dataclass
class Endpoint:
    """One running check endpoint: ``url`` (what the broker posts to), ``post`` and the checks
    its checker saw."""

    url: str
    post: Post
    seen: list[Message]


def checker(seen: list[Message]) -> Callable[[Message], LocalTransactionState]:
    def check(message: Message) -> LocalTransactionState:
        seen.append(message)
        return LocalTransactionState.COMMIT_MESSAGE

    return check


def poster(client: httpx.AsyncClient) -> Post:
    async def post(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        headers = {"Content-Type": "application/json", **headers}
        return await client.post(url, content=body, headers=headers)

    return post


@asynccontextmanager
async def thread_server(credentials: Credentials | None) -> AsyncIterator[Endpoint]:
    seen: list[Message] = []
    producer = TransactionProducer("bob-bank", NOWHERE, credentials=credentials, check=PUSH)
    producer.check_local_transaction("transfers")(checker(seen))
    url = producer.serve_checks()
    try:
        async with httpx.AsyncClient() as client:
            yield Endpoint(url, poster(client), seen)
    finally:
        producer.shutdown()


@asynccontextmanager
async def asyncio_server(credentials: Credentials | None) -> AsyncIterator[Endpoint]:
    seen: list[Message] = []
    producer = AsyncTransactionProducer("bob-bank", NOWHERE, credentials=credentials, check=PUSH)
    producer.check_local_transaction("transfers")(checker(seen))
    url = await producer.serve_checks()
    try:
        async with httpx.AsyncClient() as client:
            yield Endpoint(url, poster(client), seen)
    finally:
        await producer.shutdown()


def router_of(sync: bool) -> Callable[[Credentials | None], Any]:
    @asynccontextmanager
    async def router(credentials: Credentials | None) -> AsyncIterator[Endpoint]:
        seen: list[Message] = []
        face = TransactionProducer if sync else AsyncTransactionProducer
        producer = face("bob-bank", NOWHERE, credentials=credentials, check=PUSH)
        producer.check_local_transaction("transfers")(checker(seen))
        app = FastAPI()
        app.include_router(check_router(producer))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport) as client:
            yield Endpoint("http://bob-bank.internal:8000/halfmq/check", poster(client), seen)

    return router


PUSH = CheckMode.push("http://127.0.0.1:9/halfmq/check")
ENDPOINTS = {
    "thread server": thread_server,
    "asyncio server": asyncio_server,
    "router, async producer": router_of(sync=False),
    "router, sync producer": router_of(sync=True),
}


@pytest.fixture(params=list(ENDPOINTS))
def endpoint_kind(request: pytest.FixtureRequest) -> Any:
    return ENDPOINTS[request.param]


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HALFMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HALFMQ_SECRET_KEY", raising=False)


@pytest.fixture
async def endpoint(endpoint_kind: Any) -> AsyncIterator[Endpoint]:
    async with endpoint_kind(BOB) as running:
        yield running


def broker_signed(
    url: str, body: bytes = CHECK, keys: Credentials = BOB, at_ms: int | None = None
) -> dict[str, str]:
    """The headers the broker's check-back scheduler sends with a push check."""
    when = now_ms() if at_ms is None else at_ms
    return sign(keys.access_key, keys.secret_key, "POST", url, body, when)


async def refused(endpoint: Endpoint, headers: dict[str, str], body: bytes = CHECK) -> str:
    response = await endpoint.post(endpoint.url, headers, body)
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "detail"}
    assert BOB.secret_key not in response.text
    return str(error["code"])


async def test_a_check_the_broker_signed_is_answered(endpoint: Endpoint) -> None:
    response = await endpoint.post(endpoint.url, broker_signed(endpoint.url), CHECK)
    assert (response.status_code, response.json()) == (200, {"state": "COMMIT"})
    assert [m.transaction_id for m in endpoint.seen] == ["tx-1"]


async def test_the_query_of_the_callback_url_is_signed_too(endpoint: Endpoint) -> None:
    url = endpoint.url + "?zone=eu&instance=bob%201"
    response = await endpoint.post(url, broker_signed(url), CHECK)
    assert response.status_code == 200
    other_query = endpoint.url + "?zone=eu&instance=bob%202"
    response = await endpoint.post(other_query, broker_signed(url), CHECK)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "SIGNATURE_INVALID"
    assert len(endpoint.seen) == 1


async def test_an_unsigned_check_is_refused(endpoint: Endpoint) -> None:
    assert await refused(endpoint, {}) == "SIGNATURE_MISSING"
    partial = broker_signed(endpoint.url)
    partial["Authorization"] = re.sub(r"Nonce=[^,]*", "Nonce=", partial["Authorization"])
    assert await refused(endpoint, partial) == "SIGNATURE_MISSING"
    assert endpoint.seen == []


async def test_a_check_signed_with_another_key_is_refused(endpoint: Endpoint) -> None:
    assert await refused(endpoint, broker_signed(endpoint.url, keys=SMITH)) == "ACCESS_KEY_UNKNOWN"
    assert endpoint.seen == []


async def test_a_forged_or_altered_check_is_refused(endpoint: Endpoint) -> None:
    forged = Credentials(BOB.access_key, "a-guessed-secret")
    assert await refused(endpoint, broker_signed(endpoint.url, keys=forged)) == "SIGNATURE_INVALID"
    altered = CHECK.replace(b"tx-1", b"tx-2")
    assert await refused(endpoint, broker_signed(endpoint.url), altered) == "SIGNATURE_INVALID"
    elsewhere = broker_signed(endpoint.url.replace("/halfmq/check", "/other"))
    assert await refused(endpoint, elsewhere) == "SIGNATURE_INVALID"
    signed = broker_signed(endpoint.url)["Authorization"]
    malformed = {"Authorization": re.sub(r"Timestamp=[0-9]*", "Timestamp=yesterday", signed)}
    assert await refused(endpoint, malformed) == "SIGNATURE_INVALID"
    assert endpoint.seen == []


@pytest.mark.parametrize("seconds", [-301, 301])
async def test_a_check_outside_the_window_is_refused(endpoint: Endpoint, seconds: int) -> None:
    stale = broker_signed(endpoint.url, at_ms=now_ms() + seconds * 1000)
    assert await refused(endpoint, stale) == "TIMESTAMP_SKEWED"
    assert endpoint.seen == []


async def test_a_replayed_check_is_refused(endpoint: Endpoint) -> None:
    headers = broker_signed(endpoint.url)
    first = await endpoint.post(endpoint.url, headers, CHECK)
    assert first.status_code == 200
    assert await refused(endpoint, headers) == "NONCE_REPLAYED"
    assert len(endpoint.seen) == 1


async def test_without_credentials_checks_are_accepted_unsigned(endpoint_kind: Any) -> None:
    async with endpoint_kind(None) as endpoint:
        unsigned = await endpoint.post(endpoint.url, {}, CHECK)
        signed = await endpoint.post(endpoint.url, broker_signed(endpoint.url), CHECK)
        assert [unsigned.status_code, signed.status_code] == [200, 200]
        assert len(endpoint.seen) == 2


async def test_the_body_is_checked_before_it_is_parsed(endpoint: Endpoint) -> None:
    garbage = b"not json"
    assert await refused(endpoint, {}, garbage) == "SIGNATURE_MISSING"
    response = await endpoint.post(endpoint.url, broker_signed(endpoint.url, garbage), garbage)
    assert (response.status_code, response.json()) == (400, {"error": "not a check"})
