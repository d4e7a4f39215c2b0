"""The sans-I/O core of shared requests (``framework.batching``): when a call goes alone, when it
waits in a gathering and when that gathering is sent, and how the shared request's one answer
becomes each call's own outcome.  No broker: the faces' tests (``test_batching.py``) run it
against the real one."""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest

from framework import ConfigurationError, Message, protocol
from framework.batching import ALONE, Gatherings, Linger
from framework.protocol import HALVES, AckLane, Answer, Share

LINGER = Linger(ms=5, max_items=3, max_bytes=600)


def share(n: int, body: str = "x") -> Share:
    call = protocol.prepare(Message("transfers", body=body, msg_id=f"m-{n}"), "bob-bank")
    assert call.share is not None
    return call.share


def busy(gatherings: Gatherings[threading.Event], calls: int) -> None:
    for _ in range(calls):
        gatherings.enter(HALVES)


def test_a_call_with_nothing_else_in_flight_goes_alone_at_once() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 1)
    assert gatherings.join(share(1)) is None


def test_calls_in_flight_gather_and_a_full_gathering_is_sent_at_once() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 5)
    first, second, third = (gatherings.join(share(n)) for n in range(3))
    assert first is not None
    assert first.leads
    assert second is not None
    assert not second.leads
    assert third is not None
    assert third.gathering is first.gathering
    assert first.gathering.ready.is_set()  # max_items: its leader sends it now
    fourth = gatherings.join(share(3))  # the next call opens the next gathering
    assert fourth is not None
    assert fourth.leads
    assert fourth.gathering is not first.gathering


def test_a_gathering_is_sent_before_its_body_passes_max_bytes() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 4)
    first = gatherings.join(share(1, "a" * 200))
    second = gatherings.join(share(2, "b" * 200))
    assert first is not None
    assert second is not None
    assert second.gathering is not first.gathering  # would have passed 600 bytes
    assert first.gathering.ready.is_set()
    assert gatherings.join(share(3, "c" * 600)) is None  # too big to share at all


def test_when_only_the_gathered_calls_are_left_the_leader_need_not_wait() -> None:
    """Nagle's rule: the call in flight that made the others wait is done."""
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 3)  # one in flight alone, two about to gather
    first, second = gatherings.join(share(1)), gatherings.join(share(2))
    assert first is not None
    assert second is not None
    assert not first.gathering.ready.is_set()
    gatherings.leave(HALVES)  # the call in flight is answered
    assert first.gathering.ready.is_set()


def test_the_shared_request_carries_each_item_as_its_single_route_would() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 3)
    first, _ = gatherings.join(share(1)), gatherings.join(share(2))
    assert first is not None
    request = gatherings.request(gatherings.seal(first.gathering))
    assert request is not None
    assert (request.method, request.path) == ("POST", "/v1/transactions:batch")
    sent = orjson.loads(request.content() or b"")
    single = orjson.loads(protocol.prepare(Message("transfers", body="x", msg_id="m-1"),
                                          "bob-bank").content() or b"")  # fmt: skip
    assert sent == {"halves": [single, {**single, "msg_id": "m-2"}]}
    third = gatherings.join(share(3))
    assert third is not None
    assert third.leads
    assert gatherings.request(gatherings.seal(third.gathering)) is None  # alone: single route


def _request(count: int) -> protocol.Call[list[Answer]]:
    encoded = [b"{}"] * count
    return HALVES.request([{}] * count, encoded)


def test_each_call_gets_its_own_answer_from_a_shared_one() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    body = {
        "results": [
            {"status": 201, "result": {"transaction_id": "t-1", "msg_id": "m-1"}},
            {"status": 404, "error": {"code": "TOPIC_NOT_FOUND", "message": "no", "detail": {}}},
        ]
    }
    answer = Answer(200, orjson.dumps(body), "http://b/v1/transactions:batch", "http://b")
    first, second = gatherings.outcomes(HALVES, _request(2), answer, 2)
    assert isinstance(first, Answer)
    assert isinstance(second, Answer)
    assert (first.status, first.json()) == (201, {"transaction_id": "t-1", "msg_id": "m-1"})
    assert second.status == 404
    assert protocol.read_envelope(second) == ("TOPIC_NOT_FOUND", "no", {})
    assert second.url == "http://b/v1/transactions:batch"


def test_a_shed_or_lost_request_is_each_calls_to_retry_and_a_refused_one_goes_alone() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    shed = Answer(503, b'{"error": {"code": "STORE_UNAVAILABLE", "message": "x", "detail": {}}}')
    assert gatherings.outcomes(HALVES, _request(2), shed, 2) == [shed, shed]
    lost = httpx.ReadError("gone")
    assert gatherings.outcomes(HALVES, _request(2), lost, 2) == [lost, lost]
    too_big = Answer(413, b'{"error": {"code": "MESSAGE_TOO_LARGE", "message": "x"}}')
    assert gatherings.outcomes(HALVES, _request(2), too_big, 2) == [ALONE, ALONE]
    short = Answer(200, b'{"results": []}')  # not one answer per item
    assert gatherings.outcomes(HALVES, _request(2), short, 2) == [ALONE, ALONE]
    busy(gatherings, 3)
    assert gatherings.join(share(1)) is not None  # the lane still shares


def test_a_broker_without_the_route_makes_the_lane_go_alone_from_then_on() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    unknown = Answer(404, b'{"error": {"code": "NOT_FOUND", "message": "Not Found"}}')
    assert gatherings.outcomes(HALVES, _request(2), unknown, 2) == [ALONE, ALONE]
    busy(gatherings, 3)
    assert gatherings.join(share(1)) is None


def test_acks_are_told_back_to_the_call_that_sent_each_handle() -> None:
    lane = AckLane("smith-bank")
    request = lane.request([["h1", "h2"], ["h3"]], [b"", b""])
    assert request.path == "/v1/consumer-groups/smith-bank/ack"
    assert orjson.loads(request.content() or b"") == {"receipt_handles": ["h1", "h2", "h3"]}
    answers = request.parse(Answer(200, b'{"acked": 2, "stale": ["h2"]}'))
    assert [a.json() for a in answers] == [
        {"acked": 1, "stale": ["h2"]},
        {"acked": 1, "stale": []},
    ]
    call = protocol.ack("smith-bank", ["h1", "h2"])
    assert call.parse(answers[0]) == protocol.AckResult(1, ("h2",))


def test_closing_sends_what_is_gathered_and_every_later_call_goes_alone() -> None:
    gatherings = Gatherings(LINGER, threading.Event)
    busy(gatherings, 3)
    first = gatherings.join(share(1))
    assert first is not None
    assert gatherings.close() == [first.gathering]
    assert first.gathering.ready.is_set()
    assert gatherings.join(share(2)) is None
    gatherings.finish(first.gathering, [])
    assert first.pending.outcome is ALONE
    assert first.gathering.done.is_set()


@pytest.mark.parametrize(("ms", "items", "on"), [(0, 128, False), (2, 1, False), (2, 2, True)])
def test_linger_zero_or_one_item_is_off(ms: float, items: int, on: bool) -> None:
    assert Linger(ms, items).on is on


def test_a_negative_linger_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        Linger(-1)
