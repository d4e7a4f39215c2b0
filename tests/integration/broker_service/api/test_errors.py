"""docs/api.md's table of error codes ("Every code"), row by row: every non-2xx answer is the
envelope, never a 500 or a trace.

Rows not here: 401 / 403 / 429 ``RATE_LIMITED`` (the ACL's: api/test_acl_gate.py and
acl/test_acl_core.py) and 429 ``BUSY`` (store/test_busy.py, behind a writer queue made small).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import create_engine, text

from broker_service.store import migrate
from tests.support import BrokerApp, BrokerProcess, free_port

ENVELOPE_KEYS = {"error"}
ERROR_KEYS = {"code", "message", "detail"}

# Refused as the request is read, before any store is asked: one store is enough (the rest of
# this module runs on SQLite and PostgreSQL).
ONE_STORE = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The answer is ``status`` with exactly the envelope, carrying ``code`` and human text."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == ENVELOPE_KEYS, body
    error = body["error"]
    assert set(error) == ERROR_KEYS, error
    assert error["code"] == code, error
    assert isinstance(error["detail"], dict), error
    message = error["message"]
    assert isinstance(message, str), message
    assert " " in message.strip(), message  # words, not a bare code
    assert "Traceback" not in response.text
    detail: dict[str, Any] = error["detail"]
    return detail


async def post_json(broker: BrokerApp, path: str, raw: str | bytes) -> httpx.Response:
    return await broker.client.post(path, content=raw, headers={"content-type": "application/json"})


# -- 400: malformed JSON, bad names --------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"body": "x"', id="truncated"),
        pytest.param("{'body': 'x'}", id="single-quotes"),
        pytest.param(b"\xff\xfe{}", id="not-utf-8"),
        pytest.param("[" * 5000 + "]" * 5000, id="nested-too-deep"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/topics/t/messages", "/v1/topics/t/messages:batch"])
@ONE_STORE
async def test_malformed_json_is_400_invalid_json(broker: BrokerApp, raw: str, path: str) -> None:
    # The batch route validates its body from the bytes itself (api/schemas/bodies.py): same answers.
    await broker.topic("t")
    assert_error(await post_json(broker, path, raw), 400, "INVALID_JSON")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/topics", {"name": "has space"}, id="create"),
        pytest.param("POST", "/v1/topics", {"name": "x" * 128}, id="create-too-long"),
        pytest.param("POST", "/v1/topics/b%40d/messages", {"body": "x"}, id="send"),
        pytest.param("GET", "/v1/topics/b%40d", None, id="show"),
        pytest.param("DELETE", "/v1/topics/b%40d", None, id="delete"),
        pytest.param(
            "POST",
            "/v1/transactions",
            {"topic": "a.b", "producer_group": "g", "body": "x"},
            id="half",
        ),
    ],
)
@ONE_STORE
async def test_a_bad_topic_name_is_400(
    broker: BrokerApp, method: str, path: str, body: Any
) -> None:
    response = await broker.client.request(method, path, json=body)
    assert_error(response, 400, "INVALID_TOPIC_NAME")


async def test_a_bad_producer_group_name_is_400(broker: BrokerApp) -> None:
    await broker.topic("t")
    half = await broker.client.post(
        "/v1/transactions", json={"topic": "t", "producer_group": "g/1", "body": "x"}
    )
    assert_error(half, 400, "INVALID_PRODUCER_GROUP_NAME")
    beat = await broker.client.post("/v1/producer-groups/g%20x/heartbeat", json={"client_id": "c"})
    assert_error(beat, 400, "INVALID_PRODUCER_GROUP_NAME")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/topics", {"name": "RMQ_SYS_TRANS_HALF_TOPIC"}, id="create"),
        pytest.param("POST", "/v1/topics/SCHEDULE_TOPIC_XXXX/messages", {"body": "x"}, id="send"),
        pytest.param("DELETE", "/v1/topics/RMQ_SYS_TRANS_OP_HALF_TOPIC", None, id="delete"),
        pytest.param(
            "POST",
            "/v1/transactions",
            {"topic": "RMQ_SYS_X", "producer_group": "g", "body": "x"},
            id="half",
        ),
    ],
)
async def test_a_system_topic_is_400(broker: BrokerApp, method: str, path: str, body: Any) -> None:
    detail = assert_error(await broker.client.request(method, path, json=body), 400, "SYSTEM_TOPIC")
    assert detail["topic"].startswith(("RMQ_SYS_", "SCHEDULE_TOPIC_"))


async def test_a_name_with_a_trailing_newline_is_400(broker: BrokerApp) -> None:
    response = await broker.client.post("/v1/topics", json={"name": "abc\n"})
    assert_error(response, 400, "INVALID_TOPIC_NAME")


# -- 422: wrong types, bad values -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param({}, "body", id="body-missing"),
        pytest.param({"body": 5}, "body", id="body-not-text"),
        pytest.param({"body": "x", "queue_id": "two"}, "queue_id", id="queue-id-text"),
        pytest.param({"body": "x", "queue_id": -1}, "queue_id", id="queue-id-negative"),
        pytest.param({"body": "x", "encoding": "utf-16"}, "encoding", id="encoding-unknown"),
        pytest.param({"body": "x", "keys": "k"}, "keys", id="keys-not-a-list"),
        pytest.param({"body": "x", "properties": {"a": 1}}, "properties", id="property-not-text"),
        pytest.param({"body": "x", "deliver_at": "tomorrow"}, "deliver_at", id="deliver-at-text"),
        pytest.param({"body": "x", "deliver_at": 10**30}, "deliver_at", id="deliver-at-huge"),
        pytest.param({"body": "x", "deliver_at": 1.5e12 + 0.5}, "deliver_at", id="deliver-at-1.5"),
        pytest.param({"body": "x", "msg_id": "has space"}, "msg_id", id="msg-id-space"),
        pytest.param({"body": "x", "sharding_key": "a\x00b"}, "sharding_key", id="nul-in-text"),
        pytest.param({"body": "x", "tags": "\ud800"}, "tags", id="lone-surrogate"),
        pytest.param({"body": "x", "colour": "red"}, "colour", id="unknown-field"),
    ],
)
async def test_wrong_types_and_values_are_422_invalid_request(
    broker: BrokerApp, body: dict[str, Any], where: str
) -> None:
    await broker.topic("t")
    raw = json.dumps(body)  # escapes a lone surrogate as \ud800, as a client library would
    detail = assert_error(
        await post_json(broker, "/v1/topics/t/messages", raw), 422, "INVALID_REQUEST"
    )
    assert any(where in error["loc"] for error in detail["errors"]), detail
    # The batch route parses its body itself: the same message in a batch, the same answer.
    batch = json.dumps({"messages": [{"body": "fine"}, body]})
    detail = assert_error(
        await post_json(broker, "/v1/topics/t/messages:batch", batch), 422, "INVALID_REQUEST"
    )
    assert any(error["loc"][:3] == ["body", "messages", 1] for error in detail["errors"]), detail
    assert any(where in error["loc"] for error in detail["errors"]), detail


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        pytest.param('{"body": "x", "deliver_at": Infinity}', "deliver_at", id="infinity"),
        pytest.param('{"body": "x", "deliver_at": NaN}', "deliver_at", id="nan"),
    ],
)
@ONE_STORE
async def test_non_finite_numbers_are_422(broker: BrokerApp, raw: str, where: str) -> None:
    await broker.topic("t")
    detail = assert_error(
        await post_json(broker, "/v1/topics/t/messages", raw), 422, "INVALID_REQUEST"
    )
    assert any(where in error["loc"] for error in detail["errors"]), detail
    batch = '{"messages": [' + raw + "]}"
    detail = assert_error(
        await post_json(broker, "/v1/topics/t/messages:batch", batch), 422, "INVALID_REQUEST"
    )
    assert any(where in error["loc"] for error in detail["errors"]), detail


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        pytest.param(b"", "application/json", id="empty"),
        pytest.param(b'{"messages": [{"body": "x"}]}', None, id="no-content-type"),
        pytest.param(b'{"messages": [{"body": "x"}]}', "text/plain", id="text-plain"),
        pytest.param(b"{}", "application/json", id="no-messages"),
        pytest.param(b'{"messages": []}', "application/json", id="zero-messages"),
        pytest.param(b'{"messages": {"body": "x"}}', "application/json", id="not-a-list"),
        pytest.param(b"[]", "application/json", id="not-an-object"),
        pytest.param(b'{"messages": [], "extra": 1}', "application/json", id="unknown-field"),
    ],
)
@ONE_STORE
async def test_a_batch_body_that_is_not_a_batch_is_422(
    broker: BrokerApp, raw: bytes, content_type: str | None
) -> None:
    """What a FastAPI body parameter answers, from the route that parses its own body."""
    await broker.topic("t")
    headers = {"content-type": content_type} if content_type else {}
    response = await broker.client.post("/v1/topics/t/messages:batch", content=raw, headers=headers)
    detail = assert_error(response, 422, "INVALID_REQUEST")
    assert all(error["loc"][0] == "body" for error in detail["errors"]), detail
    topic = (await broker.client.get("/v1/topics/t")).json()
    assert all(q["max_offset"] == 0 for q in topic["queue_offsets"]), "nothing stored"


async def test_a_batch_of_a_thousand_and_one_is_422(broker: BrokerApp) -> None:
    await broker.topic("t")
    batch = {"messages": [{"body": "x"}] * 1001}
    response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
    assert_error(response, 422, "INVALID_REQUEST")
    ok = await broker.client.post(
        "/v1/topics/t/messages:batch", json={"messages": batch["messages"][:1000]}
    )
    assert ok.status_code == 201
    assert len(ok.json()["results"]) == 1000


@pytest.mark.parametrize(
    ("path", "params"),
    [
        pytest.param("/v1/messages", {"limit": 0}, id="limit-zero"),
        pytest.param("/v1/messages", {"begin": "yesterday"}, id="begin-not-a-time"),
        pytest.param("/v1/messages", {"begin": "1.5"}, id="begin-not-whole"),
        pytest.param("/v1/transactions", {"state": "MAYBE"}, id="state-unknown"),
        pytest.param("/v1/transactions", {"older_than_seconds": -1}, id="age-negative"),
    ],
)
@ONE_STORE
async def test_bad_query_parameters_are_422(
    broker: BrokerApp, path: str, params: dict[str, Any]
) -> None:
    assert_error(await broker.client.get(path, params=params), 422, "INVALID_REQUEST")


@pytest.mark.parametrize(
    ("message", "code"),
    [
        pytest.param({"body": "x", "tags": "a b"}, "INVALID_TAG", id="tag-whitespace"),
        pytest.param({"body": "x", "tags": "a||b"}, "INVALID_TAG", id="tag-bar"),
        pytest.param({"body": "x", "tags": "t" * 129}, "INVALID_TAG", id="tag-too-long"),
        pytest.param({"body": "x", "keys": [f"k{i}" for i in range(33)]}, "INVALID_KEYS", id="33"),
        pytest.param({"body": "x", "keys": ["k" * 129]}, "INVALID_KEYS", id="key-too-long"),
        pytest.param({"body": "x", "keys": [""]}, "INVALID_KEYS", id="key-empty"),
        pytest.param({"body": "x", "queue_id": 4}, "INVALID_QUEUE_ID", id="queue-id-range"),
        pytest.param({"body": "x", "delay_level": 19}, "INVALID_DELAY_LEVEL", id="delay-level"),
        pytest.param(
            {"body": "x", "properties": {"REAL_TOPIC": "other"}},
            "RESERVED_PROPERTY",
            id="reserved-property",
        ),
        pytest.param(
            {"body": "not base64!", "encoding": "base64"},
            "INVALID_BODY_ENCODING",
            id="bad-base64",
        ),
        pytest.param({"body": "\ud800"}, "INVALID_BODY_ENCODING", id="lone-surrogate-body"),
    ],
)
async def test_bad_values_the_domain_checks_are_422_with_their_code(
    broker: BrokerApp, message: dict[str, Any], code: str
) -> None:
    await broker.topic("t", queues=4)
    raw = json.dumps(message)
    assert_error(await post_json(broker, "/v1/topics/t/messages", raw), 422, code)
    # The same checks hold for a batch and for a half message.
    batch = await post_json(
        broker, "/v1/topics/t/messages:batch", json.dumps({"messages": [message]})
    )
    assert_error(batch, 422, code)
    half = {**message, "topic": "t", "producer_group": "g"}
    assert_error(await post_json(broker, "/v1/transactions", json.dumps(half)), 422, code)


async def test_a_bad_batch_stores_nothing(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    batch = {"messages": [{"body": "good"}, {"body": "bad", "tags": "a b"}]}
    assert_error(
        await broker.client.post("/v1/topics/t/messages:batch", json=batch), 422, "INVALID_TAG"
    )
    shown = (await broker.client.get("/v1/topics/t")).json()
    assert shown["queue_offsets"][0]["max_offset"] == 0


# -- 404: unknown topic, transaction, message, route ----------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        pytest.param("GET", "/v1/topics/nope", None, "TOPIC_NOT_FOUND", id="show-topic"),
        pytest.param("DELETE", "/v1/topics/nope", None, "TOPIC_NOT_FOUND", id="delete-topic"),
        pytest.param(
            "POST", "/v1/topics/nope/messages", {"body": "x"}, "TOPIC_NOT_FOUND", id="send"
        ),
        pytest.param(
            "POST",
            "/v1/transactions",
            {"topic": "nope", "producer_group": "g", "body": "x"},
            "TOPIC_NOT_FOUND",
            id="half",
        ),
        pytest.param("GET", "/v1/transactions/nope", None, "TRANSACTION_NOT_FOUND", id="txn"),
        pytest.param(
            "POST", "/v1/transactions/nope/commit", {}, "TRANSACTION_NOT_FOUND", id="commit"
        ),
        pytest.param(
            "POST", "/v1/transactions/nope/rollback", {}, "TRANSACTION_NOT_FOUND", id="rollback"
        ),
        pytest.param("GET", "/v1/messages/nope", None, "MESSAGE_NOT_FOUND", id="message"),
        pytest.param("GET", "/v1/no-such-route", None, "NOT_FOUND", id="route"),
    ],
)
async def test_unknown_things_are_404(
    broker: BrokerApp, method: str, path: str, body: Any, code: str
) -> None:
    assert_error(await broker.client.request(method, path, json=body), 404, code)


async def test_a_wrong_method_is_405_in_the_envelope(broker: BrokerApp) -> None:
    assert_error(await broker.client.put("/v1/topics"), 405, "METHOD_NOT_ALLOWED")


# -- 409: conflicts -------------------------------------------------------------------------------


async def test_a_topic_with_another_config_is_409(broker: BrokerApp) -> None:
    await broker.topic("t", queues=2)
    response = await broker.client.post("/v1/topics", json={"name": "t", "queues": 3})
    detail = assert_error(response, 409, "TOPIC_EXISTS")
    assert detail["queues"] == 2


async def test_commit_after_rollback_is_409(broker: BrokerApp) -> None:
    await broker.topic("t")
    half = await broker.client.post(
        "/v1/transactions", json={"topic": "t", "producer_group": "g", "body": "x"}
    )
    txid = half.json()["transaction_id"]
    rolled = await broker.client.post(
        f"/v1/transactions/{txid}/rollback", json={"producer_group": "g"}
    )
    assert rolled.status_code == 200
    commit = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "g"}
    )
    detail = assert_error(commit, 409, "TRANSACTION_ALREADY_RESOLVED")
    assert detail["state"] == "ROLLED_BACK"


async def test_the_same_msg_id_with_other_content_is_409(broker: BrokerApp) -> None:
    await broker.topic("t")
    first = await broker.client.post("/v1/topics/t/messages", json={"body": "a", "msg_id": "m-1"})
    assert first.status_code == 201
    other = await broker.client.post("/v1/topics/t/messages", json={"body": "b", "msg_id": "m-1"})
    assert assert_error(other, 409, "MESSAGE_ID_CONFLICT")["msg_id"] == "m-1"


# -- 413: over max_message_bytes -----------------------------------------------------------------

SMALL = 1000  # max_message_bytes; a request may carry 1000 * 4 // 3 + 64 KiB = 66869 bytes


@pytest.fixture
async def small_broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(database_url=migrated_url, max_message_bytes=SMALL) as running:
        await running.topic("t")
        yield running


async def test_a_message_over_max_message_bytes_is_413(small_broker: BrokerApp) -> None:
    """Under the request limit, over the message limit: the per-message check answers."""
    response = await small_broker.client.post("/v1/topics/t/messages", json={"body": "x" * 1001})
    detail = assert_error(response, 413, "MESSAGE_TOO_LARGE")
    assert detail["limit"] == SMALL
    props = {"body": "x", "properties": {"p": "v" * 1000}}
    assert_error(
        await small_broker.client.post("/v1/topics/t/messages", json=props),
        413,
        "MESSAGE_TOO_LARGE",
    )


async def test_a_batch_message_over_max_message_bytes_is_413_and_stores_nothing(
    small_broker: BrokerApp,
) -> None:
    """A batch of bodies alone (sent as columns) is checked as its messages are one by one."""
    for encoding, big in (
        ("utf-8", "x" * 1001),
        ("base64", base64.b64encode(b"y" * 1001).decode()),
    ):
        batch = {"messages": [{"body": "ok"}, {"body": big, "encoding": encoding}]}
        response = await small_broker.client.post("/v1/topics/t/messages:batch", json=batch)
        detail = assert_error(response, 413, "MESSAGE_TOO_LARGE")
        assert (detail["limit"], detail["size"]) == (SMALL, 1001)
    just = {"messages": [{"body": "x" * SMALL}, {"body": "ok"}]}
    assert (await small_broker.client.post("/v1/topics/t/messages:batch", json=just)).is_success
    topic = (await small_broker.client.get("/v1/topics/t")).json()
    assert sum(q["max_offset"] for q in topic["queue_offsets"]) == 2, "only the batch under it"


async def test_a_body_declared_over_the_limit_is_413(small_broker: BrokerApp) -> None:
    body = json.dumps({"body": "x" * 70_000})
    response = await post_json(small_broker, "/v1/topics/t/messages", body)
    assert_error(response, 413, "MESSAGE_TOO_LARGE")


@pytest.mark.parametrize("path", ["/v1/topics/t/messages", "/v1/topics/t/messages:batch"])
async def test_a_streamed_body_over_the_limit_is_413(small_broker: BrokerApp, path: str) -> None:
    """No Content-Length: the limit is counted as the chunks arrive."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"body": "'
        for _ in range(20):
            yield b"x" * 4096
        yield b'"}'

    response = await small_broker.client.post(
        path, content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert_error(response, 413, "MESSAGE_TOO_LARGE")


def test_a_chunked_body_over_the_limit_is_413_over_real_http(
    migrated_url: str, tmp_path: Path
) -> None:
    """The same through uvicorn, with ``Transfer-Encoding: chunked`` on a real socket."""
    process = BrokerProcess(
        migrated_url, free_port(), tmp_path / "broker.log", "--max-message-bytes", str(SMALL)
    )
    process.start()
    try:
        httpx.post(f"{process.url}/v1/topics", json={"name": "t"}).raise_for_status()

        def chunks() -> Iterator[bytes]:
            yield b'{"body": "'
            for _ in range(20):
                yield b"x" * 4096
            yield b'"}'

        response = httpx.post(
            f"{process.url}/v1/topics/t/messages",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert response.request.headers["transfer-encoding"] == "chunked"
        assert_error(response, 413, "MESSAGE_TOO_LARGE")
    finally:
        process.stop()


# -- 503: not ready -------------------------------------------------------------------------------


def _downgrade_to_base(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            config = migrate.alembic_config(url)
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
    finally:
        engine.dispose()


def _stamp_unknown_revision(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'from_a_newer_broker'"))
    finally:
        engine.dispose()


@pytest.fixture(params=["behind", "unknown"])
def stale_url(request: pytest.FixtureRequest, store_url: str) -> str:
    """A store whose schema is not the broker's: migrated down to nothing, or to a revision this
    broker does not know."""
    migrate.upgrade(store_url)
    if request.param == "behind":
        _downgrade_to_base(store_url)
    else:
        _stamp_unknown_revision(store_url)
    return store_url


async def test_a_store_with_another_schema_is_503_not_ready(stale_url: str) -> None:
    async with BrokerApp.start(database_url=stale_url, scheduler=False) as broker:
        ready = await broker.client.get("/readyz")
        assert_error(ready, 503, "NOT_READY")
        assert "halfmq db upgrade" in ready.json()["error"]["message"]
        assert ready.headers["retry-after"] == "1"
        assert (await broker.client.get("/healthz")).status_code == 200
        calls = [
            ("POST", "/v1/topics", {"name": "t"}),
            ("GET", "/v1/topics", None),
            ("POST", "/v1/topics/t/messages", {"body": "x"}),
            ("POST", "/v1/transactions", {"topic": "t", "producer_group": "g", "body": "x"}),
            ("GET", "/v1/transactions/x", None),
            ("GET", "/v1/messages/x", None),
        ]
        for method, path, body in calls:
            response = await broker.client.request(method, path, json=body)
            assert_error(response, 503, "NOT_READY")


# -- never a 500 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [
        pytest.param("POST", "/v1/echo", '"\\ud800"', id="echo-lone-surrogate"),
        pytest.param("POST", "/v1/echo", "[" * 200 + "]" * 200, id="echo-deep"),
        pytest.param("POST", "/v1/topics", '{"name": "\\ud800"}', id="name-lone-surrogate"),
        pytest.param(
            "POST", "/v1/topics/t/messages", '{"body": "x", "keys": ["\\u0000"]}', id="nul-key"
        ),
        pytest.param(
            "POST", "/v1/topics/t/messages", '{"body": "x", "tags": "a\\u0000"}', id="nul-tag"
        ),
        pytest.param("GET", "/v1/transactions/a%00b", None, id="nul-in-path"),
        pytest.param("GET", "/v1/messages?key=a%00b", None, id="nul-in-query"),
        pytest.param("GET", "/v1/messages?begin=-99999999999999999999", None, id="huge-time"),
        pytest.param(
            "POST",
            "/v1/producer-groups/g/heartbeat",
            '{"client_id": "c", "callback_url": "not a url"}',
            id="bad-callback-url",
        ),
    ],
)
async def test_hostile_input_is_a_4xx_envelope(
    broker: BrokerApp, method: str, path: str, raw: str | None
) -> None:
    await broker.topic("t")
    headers = {"content-type": "application/json"}
    response = await broker.client.request(method, path, content=raw, headers=headers)
    assert 400 <= response.status_code < 500, response.text
    assert_error(response, response.status_code, response.json()["error"]["code"])
    assert response.status_code in (400, 404, 422)
