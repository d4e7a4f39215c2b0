"""The sans-I/O core: requests, answers, retry and failover decisions, values; and the public API."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

import framework
from framework import (
    BrokerBusyError,
    BrokerUnavailableError,
    ConflictError,
    HalfMQError,
    InvalidRequestError,
    LocalTransactionState,
    Message,
    NotFoundError,
    Retry,
    Timeout,
    protocol,
)
from framework.message import from_wire, to_wire


def _attempts(urls: list[str], retry: Retry) -> protocol.Attempts:
    return protocol.Attempts(protocol.Endpoints(urls), retry, protocol.send(Message("t", body="x")))


def _error(status: int, code: str = "X") -> protocol.Answer:
    body = {"error": {"code": code, "message": "m", "detail": {"topic": "t"}}}
    return protocol.Answer(status, orjson.dumps(body), "u")


def test_success_parses_the_answer() -> None:
    attempts = _attempts(["http://a"], Retry())
    body = {"msg_id": "m", "topic": "t", "queue_id": 1, "queue_offset": 7, "duplicate": True}
    result, again = attempts.answered(protocol.Answer(201, orjson.dumps(body)))
    assert again is None
    assert (result.queue_offset, result.duplicate) == (7, True)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, InvalidRequestError),
        (422, InvalidRequestError),
        (404, NotFoundError),
        (409, ConflictError),
    ],
)
def test_client_errors_are_raised_at_once(status: int, cls: type[Exception]) -> None:
    attempts = _attempts(["http://a", "http://b"], Retry(attempts=5))
    with pytest.raises(cls) as info:
        attempts.answered(_error(status, "SOME_CODE"))
    assert isinstance(info.value, HalfMQError)
    assert info.value.code == "SOME_CODE"  # type: ignore[attr-defined]
    assert info.value.topic == "t"
    assert attempts.index == 0


def test_busy_is_retried_on_the_same_broker_with_backoff_then_raised() -> None:
    attempts = _attempts(["http://a", "http://b"], Retry(attempts=3, backoff=0.1, multiplier=2))
    assert attempts.answered(_error(429)) == (None, 0.1)
    assert attempts.index == 0
    assert attempts.answered(_error(429)) == (None, 0.2)
    with pytest.raises(BrokerBusyError):
        attempts.answered(_error(429))


def test_not_ready_and_unreachable_fail_over_to_the_next_broker() -> None:
    attempts = _attempts(["http://a", "http://b", "http://c"], Retry(attempts=4, backoff=0.01))
    attempts.answered(_error(503))
    assert attempts.url.startswith("http://b")
    attempts.unreachable(ConnectionError("refused"))
    assert attempts.url.startswith("http://c")
    attempts.unreachable(ConnectionError("refused"))
    assert attempts.url.startswith("http://a")
    with pytest.raises(BrokerUnavailableError) as info:
        attempts.unreachable(ConnectionError("refused"))
    assert info.value.attempts == 4
    assert isinstance(info.value.__cause__, ConnectionError)


def test_the_next_call_starts_on_the_broker_that_answered() -> None:
    endpoints = protocol.Endpoints(["http://a", "http://b"])
    first = protocol.Attempts(endpoints, Retry(), protocol.send(Message("t", body="x")))
    first.unreachable(ConnectionError())
    second = protocol.Attempts(endpoints, Retry(), protocol.send(Message("t", body="y")))
    assert second.url.startswith("http://b")


def test_a_non_json_error_still_becomes_a_broker_error() -> None:
    with pytest.raises(framework.BrokerError) as info:
        _attempts(["http://a"], Retry(attempts=1)).answered(protocol.Answer(418, b"teapot"))
    assert info.value.code == "HTTP_ERROR"


def test_retry_backoff_is_capped() -> None:
    retry = Retry(backoff=0.5, multiplier=10, max_backoff=2)
    assert [retry.delay(n) for n in (1, 2, 3)] == [0.5, 2, 2]
    with pytest.raises(ValueError, match="at least 1"):
        Retry(attempts=0)


def test_timeout_value_object() -> None:
    timeout = Timeout(connect=1, read=2)
    assert timeout.to_httpx(extra_read=5).read == 7
    with pytest.raises(AttributeError):
        timeout.read = 3  # type: ignore[misc]


def test_messages_round_trip_text_and_bytes() -> None:
    at = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    text = Message("t", body="héllo", keys=["k"], tags="TagA", deliver_at=at, properties={"a": "b"})
    wire = to_wire(text)
    assert wire["encoding"] == "utf-8"
    assert wire["deliver_at"] == int(at.timestamp() * 1000)
    assert from_wire({**wire, "topic": "t"}).body == "héllo"
    data = Message("t", body=b"\x00\xff")
    assert to_wire(data)["encoding"] == "base64"
    assert from_wire({**to_wire(data), "topic": "t"}).body == b"\x00\xff"
    assert Message("t", body='{"a": 1}').json() == {"a": 1}
    assert Message("t").msg_id != Message("t").msg_id
    with pytest.raises(TypeError):
        Message("t", keys="oops")


def test_check_answers_spell_the_broker_words() -> None:
    assert [s.check_answer for s in LocalTransactionState] == ["COMMIT", "ROLLBACK", "UNKNOWN"]


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(framework).items()
        if not name.startswith("_")
        and isinstance(value, type)
        and value.__module__.startswith("framework")
    }
    assert public <= set(framework.__all__)
    for name in framework.__all__:
        assert hasattr(framework, name)
