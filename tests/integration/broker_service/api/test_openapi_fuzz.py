"""Property-based fuzzing of every operation in ``/openapi.json`` (schemathesis over the ASGI app).

Each operation gets schema-valid (positive) requests and, where its schema constrains something,
schema-invalid (negative) ones, sent to the real app on a migrated store -- SQLite and PostgreSQL, as
every store test.  No answer may be a 5xx; every status must be documented and every body match its
schema (errors included: the envelope); a schema-valid request must be accepted unless what is stored
says no (an unknown topic or transaction, a conflict, a queue the topic lacks).

Half of the positive examples aim at a topic, a transaction and a message that exist, so fuzzing
reaches past "not found".  The routes answered item by item (``POST /v1/transactions:batch``, ...)
refuse a schema-violating *item* in its place, with its own 4xx, and answer the request 200: for
them a negative example passes when the request is refused whole or some item is refused.  Hypothesis is derandomized with no example database, so CI sees the same
run every time.  The operations are fuzzed by resource (``RESOURCES``: one test per resource and
store, on a store of its own, so that the workers share the run), each operation and mode a
subtest of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.python import asgi as schemathesis_asgi

from broker_service.api.schemas.common import TEXT_PATTERN
from broker_service.app import build_app
from broker_service.settings import BrokerSettings
from tests.support import BrokerApp

POSITIVE = schemathesis.GenerationMode.POSITIVE
NEGATIVE = schemathesis.GenerationMode.NEGATIVE

# Input handling is the same on both stores: PostgreSQL gets fewer examples, for what only it
# refuses (NUL in text, integer ranges), and keeps the whole file near a minute.
EXAMPLES = {"sqlite": 25, "postgresql": 10}
FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    # No "explain" phase: it re-runs a failure many times over, minutes of CI for a nicer message.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Schema-valid requests the broker may still refuse because of what is stored, not of their shape.
REFUSALS_BY_STATE = {
    404: None,
    409: None,
    # a callback URL on a host other than the heartbeat's own: refused by policy, not by schema
    403: {"CALLBACK_NOT_ALLOWED"},
    422: {"INVALID_QUEUE_ID", "DELIVER_AT_TOO_FAR"},
}


@dataclass(frozen=True)
class Seed:
    """A topic, a transaction and its message that exist in the fuzzed store."""

    topic: str
    transaction_id: str
    msg_id: str

    def aim(self, method: str, path: str) -> dict[str, str]:
        """Path parameters naming what exists (never for DELETE: the other operations need it)."""
        if method == "DELETE":
            return {}
        known = {"topic": self.topic, "transaction_id": self.transaction_id, "msg_id": self.msg_id}
        return {name: value for name, value in known.items() if "{" + name + "}" in path}


@pytest.fixture
async def seed(migrated_url: str) -> Seed:
    async with BrokerApp.start(database_url=migrated_url) as broker:
        topic = await broker.topic("fuzz", queues=4)
        half = await broker.client.post(
            "/v1/transactions",
            json={"topic": topic, "producer_group": "fuzz-group", "body": "seed", "keys": ["k"]},
        )
        assert half.status_code == 201, half.text
        return Seed(topic, half.json()["transaction_id"], half.json()["msg_id"])


@pytest.fixture
def api_schema(migrated_url: str, seed: Seed) -> Iterator[Any]:
    # No schedulers: what they do is tested elsewhere, and fuzzed callback URLs stay uncalled.
    app = build_app(BrokerSettings(database_url=migrated_url, scheduler=False))
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        # schemathesis keeps the app's lifespan running between calls; end it with the test.
        schemathesis_asgi.shutdown_lifespans()


def fuzz_cases(raw_schema: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for path, item in raw_schema["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, POSITIVE
            if _negatable(operation):
                yield method.upper(), path, NEGATIVE


def _negatable(operation: dict[str, Any]) -> bool:
    """Whether the schema constrains an input enough for a request to break it.

    A path id that only excludes NUL cannot be broken (a URL cannot carry NUL), nor can a body that
    may be any JSON.
    """
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "path" or parameter["schema"].get("pattern") != TEXT_PATTERN:
            return True
    content = operation.get("requestBody", {}).get("content", {})
    return any(
        set(media.get("schema", {})) - {"title", "description"} for media in content.values()
    )


# The paths' first segment after /v1 (``/v1/transactions:batch`` is ``transactions``); every other
# operation (health, metrics, the store's, trace, echo, brokers) is fuzzed by ``the-rest``.
RESOURCES = ("consumer-groups", "transactions", "topics", "messages", "producer-groups", "acl")
THE_REST = "the-rest"


def resource_of(path: str) -> str:
    first = path.removeprefix("/v1/").split("/")[0].split(":")[0]
    return first if path.startswith("/v1/") and first in RESOURCES else THE_REST


ITEM_ROUTES = {"/v1/transactions:batch", "/v1/transactions/decisions:batch", "/v1/messages:batch"}


def check_answer(case: schemathesis.Case, mode: Any) -> None:
    excluded = [schemathesis.checks.positive_data_acceptance]
    by_item = mode is not POSITIVE and case.operation.path in ITEM_ROUTES
    if by_item:
        excluded.append(schemathesis.checks.negative_data_rejection)
    response = case.call_and_validate(excluded_checks=excluded)
    if by_item and response.status_code == 200:
        statuses = [item["status"] for item in response.json()["results"]]
        assert any(400 <= s < 500 for s in statuses), f"no item refused: {response.text}"
        return
    if mode is not POSITIVE or response.status_code < 400:
        return
    allowed = REFUSALS_BY_STATE.get(response.status_code, set())
    code = response.json()["error"]["code"]
    assert allowed is None or code in allowed, (
        f"schema-valid request refused: {response.status_code} {response.text}"
    )


@pytest.mark.parametrize("resource", [*RESOURCES, THE_REST])
def test_every_operation_answers_as_documented(
    resource: str, api_schema: Any, seed: Seed, migrated_url: str, subtests: pytest.Subtests
) -> None:
    examples = EXAMPLES["sqlite" if migrated_url.startswith("sqlite") else "postgresql"]
    cases = [case for case in fuzz_cases(api_schema.raw_schema) if resource_of(case[1]) == resource]
    assert cases, f"no operation of {resource}: RESOURCES names one the API no longer has"
    for method, path, mode in cases:
        with subtests.test(msg=f"{method} {path} {mode.value}"):
            fuzz_operation(api_schema[path][method], seed.aim(method, path), mode, examples)


def fuzz_operation(operation: Any, aim: dict[str, str], mode: Any, examples: int) -> None:
    # Long polls answer at once: their waiting is not what fuzzing tests, and would take minutes.
    query = {"wait_seconds": 0} if _has_query(operation, "wait_seconds") else None
    strategy = operation.as_strategy(generation_mode=mode, query=query)
    if aim and mode is POSITIVE:
        aimed = operation.as_strategy(generation_mode=mode, query=query, path_parameters=aim)
        strategy = st.one_of(strategy, aimed)

    @settings(FUZZ_SETTINGS, max_examples=examples)
    @given(case=strategy.map(_no_long_poll) if mode is POSITIVE else strategy)
    def fuzz(case: schemathesis.Case) -> None:
        check_answer(case, mode)

    fuzz()


def _no_long_poll(case: schemathesis.Case) -> schemathesis.Case:
    """A body's long poll (receive) answers at once too."""
    if isinstance(case.body, dict) and isinstance(case.body.get("wait_seconds"), int | float):
        case.body["wait_seconds"] = 0
    return case


def _has_query(operation: Any, name: str) -> bool:
    parameters = operation.definition.raw.get("parameters", [])
    return any(p["in"] == "query" and p["name"] == name for p in parameters)
