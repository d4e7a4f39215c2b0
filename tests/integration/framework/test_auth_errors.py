"""The ACL's refusals as the framework raises them: 401 as ``AuthenticationError`` (a skewed clock
as ``ClockSkewError``, saying by how much), 403 as ``PermissionDeniedError``; never retried, and
never a secret in a message, a repr or a log line.  A real HTTP server answers as the broker's
gate does."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    AuthenticationError,
    BrokerError,
    CheckMode,
    ClockSkewError,
    HalfMQError,
    Message,
    PermissionDeniedError,
    PushConsumer,
    Retry,
    TransactionProducer,
)
from tests.integration.framework.signed_http import ANY_ROUTE, BOB, Captured, CaptureServer, refuse
from tests.support import wait_until

RETRIES = Retry(attempts=4, backoff=0.01)
SKEWED = {
    "broker_time_ms": 1_767_225_600_000,
    "request_time_ms": 1_767_226_012_500,
    "skew_seconds": 412.5,
    "window_seconds": 300.0,
}


def skewed(skew_seconds: float) -> CaptureServer:
    detail = {**SKEWED, "skew_seconds": skew_seconds}
    return CaptureServer(
        refuse(401, "TIMESTAMP_SKEWED", "the request's timestamp is off", **detail)
    )


def producer_on(server: CaptureServer, **options: Any) -> TransactionProducer:
    options.setdefault("check", CheckMode.none())
    return TransactionProducer(
        "bob-bank", brokers=[server.url], credentials=BOB, retry=RETRIES, **options
    )


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert BOB.secret_key not in text


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HALFMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HALFMQ_SECRET_KEY", raising=False)


@pytest.mark.parametrize(
    ("skew", "words"),
    [(412.5, "412.5 s ahead of the broker's"), (-301.0, "301.0 s behind the broker's")],
)
def test_a_skewed_clock_is_reported_as_such(skew: float, words: str) -> None:
    with (
        skewed(skew) as server,
        producer_on(server) as producer,
        pytest.raises(ClockSkewError) as raised,
    ):
        producer.send(Message("transfers", body="x"))
    error = raised.value
    assert isinstance(error, AuthenticationError)
    assert isinstance(error, BrokerError)
    assert (error.status, error.code) == (401, "TIMESTAMP_SKEWED")
    assert error.skew_seconds == skew
    assert error.window_seconds == 300.0
    assert str(error) == (
        f"401 TIMESTAMP_SKEWED: the local clock is {words} (allowed: ±300 s): signed requests "
        "are refused until this machine's clock is corrected (NTP)"
    )
    assert error.topic == "transfers"
    assert len(server.requests) == 1  # never retried: the clock will not be right a moment later
    assert_no_secret(str(error), repr(error), repr(error.args), repr(error.detail))


def test_the_skew_is_read_from_the_times_when_the_broker_gives_no_skew() -> None:
    detail = {k: v for k, v in SKEWED.items() if k != "skew_seconds"}
    refusal = refuse(401, "TIMESTAMP_SKEWED", "off", **detail)
    with (
        CaptureServer(refusal) as server,
        producer_on(server) as producer,
        pytest.raises(ClockSkewError, match=r"412\.5 s ahead") as raised,
    ):
        producer.send(Message("transfers", body="x"))
    assert raised.value.skew_seconds == 412.5


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (401, "SIGNATURE_MISSING", AuthenticationError),
        (401, "ACCESS_KEY_UNKNOWN", AuthenticationError),
        (401, "SIGNATURE_INVALID", AuthenticationError),
        (401, "NONCE_REPLAYED", AuthenticationError),
        (403, "ADDRESS_NOT_ALLOWED", PermissionDeniedError),
        (403, "PERMISSION_DENIED", PermissionDeniedError),
    ],
)
def test_refusals_map_to_their_exception_and_are_not_retried(
    status: int, code: str, kind: type[BrokerError]
) -> None:
    detail = {"access_key": "bob-bank", "resource": "transfers", "needs": "PUB", "has": "SUB"}
    with (
        CaptureServer(refuse(status, code, f"refused: {code}", **detail)) as server,
        producer_on(server) as producer,
        pytest.raises(kind) as raised,
    ):
        producer.send(Message("transfers", body="x"))
    error = raised.value
    assert type(error) is kind
    assert (error.status, error.code, error.message) == (status, code, f"refused: {code}")
    assert error.detail == detail
    assert len(server.requests) == 1


async def test_the_async_faces_raise_the_same() -> None:
    with skewed(412.5) as server:
        producer = AsyncTransactionProducer(
            "bob-bank", brokers=[server.url], credentials=BOB, check=CheckMode.push(server.url)
        )
        with pytest.raises(ClockSkewError, match=r"412\.5 s ahead"):
            await producer.start()  # the first heartbeat
        await producer.shutdown()
        consumer = AsyncPushConsumer("smith-bank", brokers=[server.url], credentials=BOB)
        consumer.subscribe("transfers")(lambda message: None)
        with pytest.raises(ClockSkewError):
            await consumer.start()
        await consumer.shutdown()
    assert len(server.requests) == 2


def test_a_sync_consumer_that_may_not_start_says_why() -> None:
    refusal = refuse(403, "PERMISSION_DENIED", "access key 'bob-bank' may not SUB 'transfers'")
    with CaptureServer(refusal) as server:
        consumer = PushConsumer("smith-bank", brokers=[server.url], credentials=BOB)
        consumer.subscribe("transfers")(lambda message: None)
        with pytest.raises(PermissionDeniedError, match="may not SUB"):
            consumer.start()
        consumer.shutdown()


def heartbeats_then_refused(status: int, code: str) -> Iterator[tuple[int, Any]]:
    yield 200, ANY_ROUTE
    while True:
        yield status, {"error": {"code": code, "message": "signature does not match"}}


def test_background_refusals_are_logged_without_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = heartbeats_then_refused(401, "SIGNATURE_INVALID")

    def reply(request: Captured) -> tuple[int, Any]:
        return next(answers)

    caplog.set_level(logging.DEBUG)
    with CaptureServer(reply) as server:
        producer = producer_on(server, check=CheckMode.push(server.url), heartbeat_interval=0.05)
        with producer:
            wait_until(lambda: len(server.requests) >= 3, 10, "refused heartbeats")
    refused = [r for r in caplog.records if "SIGNATURE_INVALID" in r.getMessage()]
    assert refused
    assert all(r.levelno == logging.WARNING for r in refused)
    assert_no_secret(caplog.text, *(repr(r.args) for r in caplog.records))


def test_a_refusal_without_the_envelope_is_still_an_authentication_error() -> None:
    with (
        CaptureServer(lambda request: (401, "proxy: login required")) as server,
        producer_on(server) as producer,
        pytest.raises(AuthenticationError) as raised,
    ):
        producer.send(Message("transfers", body="x"))
    assert raised.value.code == "HTTP_ERROR"
    assert isinstance(raised.value, HalfMQError)
