"""Times in answers: epoch milliseconds to RFC 3339, exact over the years the API accepts; and
times in requests: epoch milliseconds (whole) or RFC 3339."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import TypeAdapter, ValidationError

from broker_service.api.schemas.common import MAX_TIME_MS, MIN_TIME_MS, TimeIn, rfc3339
from tests.support import BrokerApp

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _exact(ms: int) -> str:
    moment = EPOCH + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_rfc3339_is_exact_at_the_edges_and_around_the_epoch() -> None:
    assert rfc3339(None) is None
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(-1) == "1969-12-31T23:59:59.999Z"
    assert rfc3339(1_763_700_000_123) == "2025-11-21T04:40:00.123Z"
    assert rfc3339(MIN_TIME_MS) == "0001-01-01T00:00:00.000Z"
    # A float division would round this one up to .998 or a second later.
    assert rfc3339(MAX_TIME_MS) == "9999-12-31T23:59:59.999Z"


def test_rfc3339_matches_exact_arithmetic_on_random_times() -> None:
    rng = random.Random(7)
    for ms in [rng.randint(MIN_TIME_MS, MAX_TIME_MS) for _ in range(20_000)]:
        assert rfc3339(ms) == _exact(ms), ms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30", 30),
        ("30.0", 30),
        ("-5.00", -5),
        (" 1763700000123 ", 1_763_700_000_123),
        ("2025-11-21T04:40:00.123Z", 1_763_700_000_123),
    ],
)
def test_a_time_in_a_query_is_whole_milliseconds_or_rfc3339(text: str, expected: int) -> None:
    assert TypeAdapter(TimeIn).validate_python(text) == expected


@pytest.mark.parametrize("text", ["30.5", "30.", "1e3", "0x10", "tomorrow", "true"])
def test_a_time_that_is_neither_is_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(TimeIn).validate_python(text)


async def test_a_whole_number_with_a_decimal_point_is_a_time_in_a_query(broker: BrokerApp) -> None:
    await broker.topic("t")
    answer = await broker.client.get("/v1/messages", params={"topic": "t", "begin": "30.0"})
    assert answer.status_code == 200, answer.text
    refused = await broker.client.get("/v1/messages", params={"topic": "t", "begin": "30.5"})
    assert refused.status_code == 422, refused.text
