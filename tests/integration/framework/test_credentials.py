"""Every face of the framework signs by itself: producers and consumers, sync and asyncio, with
keys given as ``Credentials``, as a pair, or read from ``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``.

Each request is checked as the broker checks it (``broker_service.acl.signature.verify``), as it
arrived at a real HTTP server, or (for a transport given in code) as httpx handed it over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    CheckMode,
    ConfigurationError,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)
from framework.signing import resolve_credentials
from halfmq.testing import InProcessBroker
from tests.integration.framework.signed_http import (
    ANY_ROUTE,
    BOB,
    SIGNATURE_HEADERS,
    SMITH,
    Captured,
    CaptureServer,
    broker_verifies,
    verified,
)
from tests.support import wait_until

PUSH = CheckMode.push("http://127.0.0.1:9/halfmq/check")  # start() heartbeats; no check comes


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HALFMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HALFMQ_SECRET_KEY", raising=False)
    # The client trace's reports (off by default) are requests too: each must be signed.
    monkeypatch.setenv("HALFMQ_CLIENT_TRACE", "true")


@pytest.fixture
def bob_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALFMQ_ACCESS_KEY", BOB.access_key)
    monkeypatch.setenv("HALFMQ_SECRET_KEY", BOB.secret_key)


def slow_polls(request: Captured) -> tuple[int, Any]:
    """Every route answered; a receive waits a little, as a long-poll with nothing to deliver."""
    if request.path.endswith("/receive"):
        time.sleep(0.05)
    return 200, ANY_ROUTE


@pytest.fixture
def server() -> Iterator[CaptureServer]:
    with CaptureServer(slow_polls) as running:
        yield running


def assert_all_signed_by(server: CaptureServer, access_key: str) -> list[str]:
    """Every request verified at the broker's verifier, each with its own nonce; their routes."""
    assert server.requests
    signed = [verified(request) for request in server.requests]
    assert {s.access_key for s in signed} == {access_key}
    assert len({s.nonce for s in signed}) == len(signed)
    return [f"{r.method} {r.path}" for r in server.requests]


def commit(message: Message, arg: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


# -- the keys ----------------------------------------------------------------------------------


def test_credentials_are_given_as_a_value_a_pair_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_credentials(BOB) is BOB
    assert resolve_credentials(("bob-bank", "bob-bank-secret-2026")) == BOB
    assert resolve_credentials(None) is None
    monkeypatch.setenv("HALFMQ_ACCESS_KEY", "smith-bank")
    monkeypatch.setenv("HALFMQ_SECRET_KEY", "smith-bank-secret-2026")
    assert resolve_credentials(None) == SMITH
    assert resolve_credentials(BOB) is BOB  # given keys win over the environment


@pytest.mark.parametrize(
    "wrong",
    [
        ("bob-bank", "bob-bank-secret-2026", "extra"),
        ["bob-bank", "bob-bank-secret-2026"],
        ("bob-bank", b"bob-bank-secret-2026"),
        "bob-bank:bob-bank-secret-2026",
    ],
)
def test_a_wrong_form_is_refused_without_echoing_the_secret(wrong: Any) -> None:
    with pytest.raises(ConfigurationError, match="access_key, secret_key") as raised:
        TransactionProducer("bob-bank", brokers=["http://127.0.0.1:9"], credentials=wrong)
    assert "secret-2026" not in str(raised.value)
    assert "secret-2026" not in repr(raised.value)


def test_every_face_reads_the_environment_when_built(bob_in_env: None) -> None:
    brokers = ["http://127.0.0.1:9"]
    faces: list[Any] = [
        TransactionProducer("bob-bank", brokers),
        AsyncTransactionProducer("bob-bank", brokers),
        PushConsumer("smith-bank", brokers),
        AsyncPushConsumer("smith-bank", brokers),
    ]
    assert [face.credentials for face in faces] == [BOB] * 4
    explicit = PushConsumer("smith-bank", brokers, credentials=("smith-bank", SMITH.secret_key))
    assert explicit.credentials == SMITH
    for face in faces:
        assert "secret-2026" not in repr(face.__dict__)


# -- on the wire: a real server and the broker's verifier --------------------------------------


def test_the_sync_producer_signs_every_request(server: CaptureServer) -> None:
    producer = TransactionProducer("bob-bank", brokers=[server.url], check=PUSH, credentials=BOB)
    producer.execute_local_transaction("transfers")(commit)
    with producer:
        producer.send(Message("transfers", body="plain", keys=["t-1"]))
        producer.send_batch([Message("transfers", body="a"), Message("transfers", body="b")])
        result = producer.send_message_in_transaction(Message("transfers", body="été"))
        producer.transaction("tx-1")
    assert result.resolution == "COMMITTED"
    assert assert_all_signed_by(server, "bob-bank") == [
        "POST /v1/producer-groups/bob-bank/heartbeat",
        "POST /v1/topics/transfers/messages",
        "POST /v1/topics/transfers/messages:batch",
        "POST /v1/transactions",
        "POST /v1/transactions/tx-1/commit",
        "GET /v1/transactions/tx-1",
        "POST /v1/trace",  # the client-side trace, reported on close
    ]


async def test_the_async_producer_signs_every_request(server: CaptureServer) -> None:
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[server.url], check=PUSH, credentials=("bob-bank", BOB.secret_key)
    )
    producer.execute_local_transaction("transfers")(commit)
    async with producer:
        await producer.send(Message("transfers", body="plain"))
        await producer.send_message_in_transaction(Message("transfers", body="été"))
    assert assert_all_signed_by(server, "bob-bank") == [
        "POST /v1/producer-groups/bob-bank/heartbeat",
        "POST /v1/topics/transfers/messages",
        "POST /v1/transactions",
        "POST /v1/transactions/tx-1/commit",
        "POST /v1/trace",  # the client-side trace, reported on close
    ]


def test_the_sync_consumer_signs_every_request(server: CaptureServer) -> None:
    consumer = PushConsumer("smith-bank", brokers=[server.url], credentials=SMITH, wait_seconds=1)
    consumer.subscribe("transfers")(lambda message: None)
    with consumer:
        wait_until(lambda: len(server.requests) >= 4, 10, "a few receives")
    routes = assert_all_signed_by(server, "smith-bank")
    assert routes[:3] == [
        "POST /v1/consumer-groups",
        "POST /v1/consumer-groups/smith-bank/subscriptions",
        "POST /v1/consumer-groups/smith-bank/receive",
    ]


async def test_the_async_consumer_signs_every_request(server: CaptureServer) -> None:
    consumer = AsyncPushConsumer(
        "smith-bank", brokers=[server.url], credentials=SMITH, wait_seconds=1
    )
    consumer.subscribe("transfers")(lambda message: None)
    async with consumer:
        await asyncio.to_thread(wait_until, lambda: len(server.requests) >= 4, 10, "receives")
    routes = assert_all_signed_by(server, "smith-bank")
    assert routes[:3] == [
        "POST /v1/consumer-groups",
        "POST /v1/consumer-groups/smith-bank/subscriptions",
        "POST /v1/consumer-groups/smith-bank/receive",
    ]


def test_keys_from_the_environment_sign(server: CaptureServer, bob_in_env: None) -> None:
    with TransactionProducer("bob-bank", brokers=[server.url], check=CheckMode.none()) as producer:
        producer.send(Message("transfers", body="x"))
    assert assert_all_signed_by(server, "bob-bank") == [
        "POST /v1/topics/transfers/messages",
        "POST /v1/trace",
    ]


def test_without_keys_requests_go_unsigned(server: CaptureServer) -> None:
    with TransactionProducer("bob-bank", brokers=[server.url], check=CheckMode.none()) as producer:
        assert producer.credentials is None
        producer.send(Message("transfers", body="x"))
    assert [r.signed for r in server.requests] == [False, False]  # the send, the trace report


def test_a_retried_request_is_signed_afresh() -> None:
    answers = iter([(503, {"error": {"code": "NOT_READY", "message": "starting"}})])

    def busy_once(request: Captured) -> tuple[int, Any]:
        return next(answers, (200, ANY_ROUTE))

    with CaptureServer(busy_once) as server:
        producer = TransactionProducer(
            "bob-bank", brokers=[server.url], check=CheckMode.none(), credentials=BOB
        )
        with producer:
            producer.send(Message("transfers", body="x"))
    first, second, _trace = (verified(r) for r in server.requests)
    assert first.nonce != second.nonce


# -- a transport given in code (tests, proxies) is signed through -------------------------------


class Capture:
    """httpx's MockTransport used only to see what the client hands its transport."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=ANY_ROUTE)

    def verified_keys(self) -> list[str]:
        return [
            broker_verifies(
                r.method, r.url.raw_path.decode("ascii"), r.headers, r.content
            ).access_key
            for r in self.requests
        ]


def test_a_given_sync_transport_is_signed_through() -> None:
    capture = Capture()
    producer = TransactionProducer(
        "bob-bank",
        brokers=["http://broker"],
        check=CheckMode.none(),
        transport=httpx.MockTransport(capture),
        credentials=BOB,
    )
    with producer:
        producer.send(Message("transfers", body="x"))
    assert capture.verified_keys() == ["bob-bank", "bob-bank"]  # the send, the trace report


async def test_a_given_async_transport_is_signed_through() -> None:
    capture = Capture()
    producer = AsyncTransactionProducer(
        "smith-bank",
        brokers=["http://broker"],
        check=CheckMode.none(),
        transport=httpx.MockTransport(capture),
        credentials=SMITH,
    )
    async with producer:
        await producer.send(Message("transfers", body="x"))
    assert capture.verified_keys() == ["smith-bank", "smith-bank"]  # the send, the trace report


# -- the in-process test broker's own clients ---------------------------------------------------


def test_the_in_process_broker_signs_its_own_requests() -> None:
    with InProcessBroker(credentials=("bob-bank", BOB.secret_key)) as broker:
        broker.create_topic("transfers")
        with broker.client() as client:
            response = client.get("/v1/topics", params={"limit": 5})
        assert response.status_code == 200
        sent = response.request
        signed = broker_verifies(sent.method, sent.url.raw_path.decode(), sent.headers, b"")
        assert signed.access_key == "bob-bank"


async def test_the_in_process_broker_signs_its_own_async_requests(bob_in_env: None) -> None:
    async with InProcessBroker() as broker:  # keys from the environment
        assert broker.credentials == BOB
        async with broker.async_client() as client:
            response = await client.post("/v1/topics", json={"name": "transfers", "queues": 1})
        assert response.status_code == 201
        sent = response.request
        signed = broker_verifies(
            sent.method, sent.url.raw_path.decode(), sent.headers, sent.content
        )
        assert signed.access_key == "bob-bank"


def test_the_in_process_broker_without_keys_sends_unsigned() -> None:
    with InProcessBroker() as broker, broker.client() as client:
        response = client.get("/v1/topics")
    assert response.status_code == 200
    sent = response.request.headers
    assert not [name for name in SIGNATURE_HEADERS if name in sent], sent
