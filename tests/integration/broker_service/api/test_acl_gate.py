"""The ACL gate (issue 14): every route refuses an unsigned request, each refusal kind over real
HTTP, replay across two brokers on one PostgreSQL, hot reload, producer groups and callbacks."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker_service.api.permissions import RouteRules, admin, public
from framework.signing import Credentials, HalfmqAuth, sign_headers
from tests.support import (
    ACL,
    BOB,
    FARAWAY,
    OPERATOR,
    SMITH,
    TELLER,
    BrokerApp,
    BrokerProcess,
    free_port,
    signed,
    wait_until,
)


def _filled(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x-1234567", path)


def _route_table(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) the app serves: its OpenAPI paths and its documentation pages."""
    table = [
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    ]
    table += [
        (m, r.path) for r in _routes(app.routes) for m in getattr(r, "methods", None) or ()
        if m != "HEAD"
    ]  # fmt: skip
    return sorted(set(table))


def _routes(routes: list[Any]) -> Iterator[Any]:
    """Every route, inside included routers too (FastAPI includes a router as one entry that
    keeps its ``original_router``; ours are included without a prefix of their own)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        else:
            yield route


async def test_every_route_of_the_app_refuses_an_unsigned_request(acl_app: BrokerApp) -> None:
    table = _route_table(acl_app.app)
    assert len(table) >= 40
    assert any(path.startswith("/console/") for _, path in table)  # the console is served
    public = {"/healthz", "/readyz", "/console/login", "/console/static/{name}", "/favicon.ico"}
    refused = 0
    for method, path in table:
        response = await acl_app.client.request(method, _filled(path))
        if path in public:
            # the login page; posting it without its CSRF token does nothing (403)
            assert response.status_code in (200, 403, 404, 503), (method, path)
            continue
        if path == "/console" or path.startswith("/console/"):
            # no session: a GET is sent to the login page and shown nothing; the rest is 401
            if method == "GET":
                assert response.status_code == 303, (method, path, response.text)
                assert response.headers["location"].startswith("/console/login?next=")
                assert response.content == b""
            else:
                assert response.status_code == 401, (method, path, response.text)
                assert response.json()["error"]["code"] == "SESSION_MISSING"
            refused += 1
            continue
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"]["code"] == "SIGNATURE_MISSING"
        refused += 1
    assert refused == sum(1 for _, path in table if path not in public)


def _acl_app(migrated_url: str, acl_file: Path) -> Any:
    from broker_service.app import build_app
    from broker_service.settings import BrokerSettings

    return build_app(BrokerSettings(database_url=migrated_url, acl_file=acl_file))


def test_every_route_has_a_rule_of_its_own(migrated_url: str, acl_file: Path) -> None:
    """Each route declares its rule where it is defined; the gate's table, built from the app's
    routes, has one for every (method, path) the app serves, and none left to the default."""
    app = _acl_app(migrated_url, acl_file)
    table = RouteRules.of(app.routes)
    assert table.undeclared == (), f"routes that declare no ACL rule: {table.undeclared}"
    for method, path in _route_table(app):
        assert (method, path) in table.rules, f"{method} {path} has no ACL rule"
    assert set(table.rules) == set(_route_table(app))


def test_a_route_that_declares_nothing_needs_admin_and_is_named() -> None:
    from fastapi import FastAPI

    app = FastAPI(openapi_url=None)

    @app.get("/v1/forgotten/{name}")
    async def forgotten(name: str) -> None: ...

    table = RouteRules.of(app.routes)
    assert table.undeclared == (("GET", "/v1/forgotten/{name}"),)
    assert table.rule_for("GET", "/v1/forgotten/x") == (admin, {"name": "x"})
    assert table.rule_for("GET", "/v1/nowhere") == (admin, {})  # no route at all


def test_acl_public_ops_opens_the_operations_pages_only(migrated_url: str, acl_file: Path) -> None:
    routes = _acl_app(migrated_url, acl_file).routes
    closed, opened = RouteRules.of(routes), RouteRules.of(routes, public_ops=True)
    for path in ("/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"):
        assert closed.rule_for("GET", path) == (admin, {}), path
        assert opened.rule_for("GET", path) == (public, {}), path
    assert opened.rule_for("POST", "/v1/echo") == (admin, {})
    assert opened.rule_for("GET", "/v1/acl") == (admin, {})


def test_the_permissions_table_in_the_docs_is_the_code(migrated_url: str, acl_file: Path) -> None:
    docs = (Path(__file__).parents[4] / "docs" / "acl.md").read_text()
    for method, path in RouteRules.of(_acl_app(migrated_url, acl_file).routes).rules:
        assert f"`{method} {path}`" in docs, f"docs/acl.md does not list {method} {path}"


# -- over real HTTP --------------------------------------------------------------------------


@pytest.fixture
def acl_broker(migrated_url: str, acl_file: Path, tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log", "--acl",
                            str(acl_file), "--acl-reload-seconds", "0.5")  # fmt: skip
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _client(broker: BrokerProcess, credentials: Credentials | None) -> httpx.Client:
    auth = HalfmqAuth(credentials) if credentials else None
    return httpx.Client(base_url=broker.url, auth=auth, timeout=10)


def _code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def _signed_post(
    broker: BrokerProcess, credentials: Credentials, path: str, body: bytes, **overrides: Any
) -> httpx.Response:
    headers = sign_headers(credentials, "POST", path, "", body, **overrides)
    headers["content-type"] = "application/json"
    return httpx.post(f"{broker.url}{path}", content=body, headers=headers, timeout=10)


def test_each_refusal_kind_over_real_http(acl_broker: BrokerProcess) -> None:
    with _client(acl_broker, OPERATOR) as operator:
        assert operator.post("/v1/topics", json={"name": "transfers", "queues": 2}).status_code in (
            200,
            201,
        )
    body = b'{"body": "hello"}'
    path = "/v1/topics/transfers/messages"
    unsigned = httpx.post(f"{acl_broker.url}{path}", content=body, timeout=10)
    assert (unsigned.status_code, _code(unsigned)) == (401, "SIGNATURE_MISSING")
    unknown = _signed_post(acl_broker, Credentials("nobody-key", "nobody-secret"), path, body)
    assert (unknown.status_code, _code(unknown)) == (401, "ACCESS_KEY_UNKNOWN")
    forged = _signed_post(acl_broker, Credentials("bob-bank-key", "guessed-secret"), path, body)
    assert (forged.status_code, _code(forged)) == (401, "SIGNATURE_INVALID")
    stale_ms = int(time.time() * 1000) - 301_000
    stale = _signed_post(acl_broker, BOB, path, body, now_ms=stale_ms)
    assert (stale.status_code, _code(stale)) == (401, "TIMESTAMP_SKEWED")
    assert "skew" in str(stale.json()["error"]["detail"])
    nonce = "fixed-nonce-0001"
    first = _signed_post(acl_broker, BOB, path, body, nonce=nonce)
    assert first.status_code == 201, first.text
    replayed = httpx.post(f"{acl_broker.url}{path}", content=body, headers=first.request.headers)
    assert (replayed.status_code, _code(replayed)) == (401, "NONCE_REPLAYED")
    faraway = _signed_post(acl_broker, FARAWAY, path, body)
    assert (faraway.status_code, _code(faraway)) == (403, "ADDRESS_NOT_ALLOWED")
    smith = _signed_post(acl_broker, SMITH, path, body)
    assert (smith.status_code, _code(smith)) == (403, "PERMISSION_DENIED")
    log = acl_broker.log_path.read_text()
    for secret in ("bob-bank-secret", "smith-bank-secret", "operator-secret", "guessed-secret"):
        assert secret not in log


def test_a_replayed_request_takes_no_effect_and_reads_no_data(acl_broker: BrokerProcess) -> None:
    """The nonce is remembered with the request's own write: a replayed send appends nothing; a
    replayed read (which writes nothing) is refused before its response goes out."""
    with _client(acl_broker, OPERATOR) as operator:
        operator.post("/v1/topics", json={"name": "transfers", "queues": 1})
    path = "/v1/topics/transfers/messages"
    first = _signed_post(acl_broker, BOB, path, b'{"body": "only once"}')
    assert first.status_code == 201, first.text
    for _ in range(3):
        again = httpx.post(f"{acl_broker.url}{path}", content=first.request.content,
                           headers=first.request.headers, timeout=10)  # fmt: skip
        assert (again.status_code, _code(again)) == (401, "NONCE_REPLAYED")
    read_path, query = "/v1/messages", "topic=transfers"
    headers = sign_headers(SMITH, "GET", read_path, query, b"")
    read = httpx.get(f"{acl_broker.url}{read_path}?{query}", headers=headers, timeout=10)
    assert read.status_code == 200, read.text
    bodies = [m["body"] for m in read.json()["messages"]]
    assert bodies == ["only once"]
    replayed_read = httpx.get(f"{acl_broker.url}{read_path}?{query}", headers=headers, timeout=10)
    assert (replayed_read.status_code, _code(replayed_read)) == (401, "NONCE_REPLAYED")
    assert "only once" not in replayed_read.text


def test_producer_groups_are_closed_and_callbacks_cannot_be_aimed_elsewhere(
    acl_broker: BrokerProcess,
) -> None:
    with _client(acl_broker, OPERATOR) as operator:
        operator.post("/v1/topics", json={"name": "transfers", "queues": 2})
    with _client(acl_broker, BOB) as bob, _client(acl_broker, SMITH) as smith:
        half = bob.post("/v1/transactions", json={"topic": "transfers",
                        "producer_group": "bob-bank", "body": "100"})  # fmt: skip
        assert half.status_code == 201, half.text
        txid = half.json()["transaction_id"]
        hijack = smith.post("/v1/producer-groups/bob-bank/heartbeat",
                            json={"client_id": "attacker", "callback_url": "http://127.0.0.1:1/x"})  # fmt: skip
        assert (hijack.status_code, _code(hijack)) == (403, "PERMISSION_DENIED")
        rollback = smith.post(f"/v1/transactions/{txid}/rollback",
                              json={"producer_group": "bob-bank"})  # fmt: skip
        assert (rollback.status_code, _code(rollback)) == (403, "PERMISSION_DENIED")
        as_operator = smith.post(f"/v1/transactions/{txid}/rollback", json={})
        assert (as_operator.status_code, _code(as_operator)) == (403, "PERMISSION_DENIED")
        with _client(acl_broker, TELLER) as teller:  # PUB on the group is not enough
            for decision in ("commit", "rollback"):
                ended = teller.post(f"/v1/transactions/{txid}/{decision}",
                                    json={"producer_group": "bob-bank"})  # fmt: skip
                assert (ended.status_code, _code(ended)) == (403, "PERMISSION_DENIED")
                assert "transfers" in ended.json()["error"]["message"]
            assert teller.get(f"/v1/transactions/{txid}").json()["state"] == "PREPARED"
        metadata = bob.post("/v1/producer-groups/bob-bank/heartbeat",
                            json={"client_id": "bob-1", "callback_url": "http://169.254.169.254/"})  # fmt: skip
        assert (metadata.status_code, _code(metadata)) == (403, "CALLBACK_NOT_ALLOWED")
        own = bob.post("/v1/producer-groups/bob-bank/heartbeat",
                       json={"client_id": "bob-1", "callback_url": "http://127.0.0.1:9/check"})  # fmt: skip
        assert own.status_code == 200, own.text
        commit = bob.post(f"/v1/transactions/{txid}/commit", json={"producer_group": "bob-bank"})
        assert commit.status_code == 200, commit.text
        assert bob.get(f"/v1/transactions/{txid}").json()["state"] == "COMMITTED"


def test_hot_reload_grants_revokes_and_keeps_the_last_good_version(
    acl_broker: BrokerProcess, acl_file: Path
) -> None:
    with _client(acl_broker, OPERATOR) as operator:
        operator.post("/v1/topics", json={"name": "audit", "queues": 1})
        before = operator.get("/v1/acl/version").json()["version"]
    with _client(acl_broker, SMITH) as smith:
        denied = smith.post("/v1/topics/audit/messages", json={"body": "x"})
        assert denied.status_code == 403
        acl_file.write_text(ACL.replace("      - transfers=SUB\n", "      - transfers=SUB\n      - audit=PUB\n"))  # fmt: skip
        wait_until(lambda: smith.post("/v1/topics/audit/messages", json={"body": "x"}).status_code
                   == 201, 15, "the grant to apply")  # fmt: skip
        acl_file.write_text(ACL)
        wait_until(lambda: smith.post("/v1/topics/audit/messages", json={"body": "x"}).status_code
                   == 403, 15, "the revoke to apply")  # fmt: skip
        with _client(acl_broker, OPERATOR) as operator:
            good = operator.get("/v1/acl/version").json()["version"]
            assert good == before
            acl_file.write_text(
                ACL.replace("accessKey: smith-bank-key", "acessKey: smith-bank-key")
            )
            wait_until(lambda: "ACL file refused" in acl_broker.log_path.read_text(), 15,
                       "the invalid edit to be refused")  # fmt: skip
            assert operator.get("/v1/acl/version").json()["version"] == good
        assert smith.post("/v1/topics/audit/messages", json={"body": "x"}).status_code == 403
    log = acl_broker.log_path.read_text()
    assert "plain_acl.yml:" in log
    assert "acessKey" in log


async def test_the_framework_signs_by_itself_in_process(acl_app: BrokerApp) -> None:
    async with signed(acl_app, OPERATOR) as operator:
        created = await operator.post("/v1/topics", json={"name": "transfers", "queues": 1})
        assert created.status_code == 201, created.text
        shown = await operator.get("/v1/acl")
        assert shown.status_code == 200
        assert "secret" not in shown.text.lower().replace("secret_key", "")
        assert "operator-secret" not in shown.text


def test_replay_to_a_second_broker_on_the_same_postgresql_is_refused(
    pg_url: str, acl_file: Path, tmp_path: Path
) -> None:
    from broker_service.store import migrate

    migrate.upgrade(pg_url)
    brokers = [
        BrokerProcess(pg_url, free_port(), tmp_path / f"broker-{n}.log", "--acl", str(acl_file))
        for n in range(2)
    ]
    for broker in brokers:
        broker.start()
    try:
        with _client(brokers[0], OPERATOR) as operator:
            operator.post("/v1/topics", json={"name": "transfers", "queues": 1})
        body = b'{"body": "once"}'
        path = "/v1/topics/transfers/messages"
        first = _signed_post(brokers[0], BOB, path, body)
        assert first.status_code == 201, first.text
        replayed = httpx.post(f"{brokers[1].url}{path}", content=body,
                              headers=first.request.headers, timeout=10)  # fmt: skip
        assert (replayed.status_code, _code(replayed)) == (401, "NONCE_REPLAYED")
    finally:
        for broker in brokers:
            broker.stop()


def test_halfmq_acl_mirrors_mqadmin(acl_broker: BrokerProcess, acl_file: Path) -> None:
    from typer.testing import CliRunner

    from halfmq.cli import app

    env = {"HALFMQ_BROKER": acl_broker.url, "HALFMQ_ACCESS_KEY": "operator-key",
           "HALFMQ_SECRET_KEY": "operator-secret"}  # fmt: skip
    runner = CliRunner()

    def halfmq(*args: str) -> Any:
        result = runner.invoke(app, [*args, "--json"], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.output) if result.output.strip() else None

    before = halfmq("acl", "version")["version"]
    created = halfmq("acl", "update-account", "-a", "audit-reader", "-s", "audit-secret-1",
                     "-t", "audit=SUB,transfers=DENY", "-g", "auditors=SUB")  # fmt: skip
    assert created["topic_perms"] == ["audit=SUB", "transfers=DENY"]
    assert halfmq("acl", "version")["version"] != before
    shown = halfmq("acl", "show")
    assert "audit-reader" in [a["access_key"] for a in shown["accounts"]]
    assert "audit-secret-1" not in json.dumps(shown)
    assert "audit-reader" in acl_file.read_text(), "the change is written to the broker's file"
    halfmq("acl", "delete-account", "-a", "audit-reader")
    assert halfmq("acl", "version")["version"] == before
    refused = runner.invoke(app, ["acl", "show"], env={**env, "HALFMQ_ACCESS_KEY": "bob-bank-key",
                            "HALFMQ_SECRET_KEY": "bob-bank-secret"})  # fmt: skip
    assert refused.exit_code != 0
    assert "PERMISSION_DENIED" in refused.output
