"""Hardening (issue 14, item 8): no secret in a log line or an error, the Host check against DNS
rebinding, header limits, a bound on deliver_at, ``Allow`` on 405, TLS, and the warning of a broker
listening beyond loopback with the ACL off.  Real broker processes over real HTTP where the
behaviour is the process's (logging, uvicorn, TLS); the app in process where it is the app's."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from broker_service.api.hardening import allowed_hosts, exposure_warning
from broker_service.domain.config import DEFAULT_MAX_DELAY_SECONDS, DomainConfig
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.logs import RedactSecrets, redact, safe_url
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from framework import (
    CheckMode,
    HalfMQError,
    LocalTransactionState,
    Message,
    Retry,
    TransactionProducer,
)
from halfmq.cli import app as cli
from tests.support import BrokerApp, BrokerProcess, free_port, wait_until

FAST = (
    "--transaction-timeout-seconds", "0.5",
    "--transaction-check-interval-seconds", "0.3",
    "--producer-expiry-seconds", "30",
    "--check-timeout-seconds", "3",
)  # fmt: skip


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert set(error) == {"code", "message", "detail"}
    return error


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- redaction, as a function and as a logging filter ------------------------------------------


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        (
            "postgresql+psycopg://bob:S3cr%40t@db:5432/prod?options=-csearch_path%3Dx",
            "postgresql+psycopg://bob:***@db:5432/prod?options=-csearch_path%3Dx",
        ),
        (
            'HTTP Request: POST http://user:pw@127.0.0.1:81/cb?token=abc&x=1 "HTTP/1.1 200 OK"',
            'HTTP Request: POST http://user:***@127.0.0.1:81/cb?token=***&x=1 "HTTP/1.1 200 OK"',
        ),
        (
            "https://h/cb?a=1&api_key=k1&X-Signature=s&sig=s2&auth=a&client_secret=c#f",
            "https://h/cb?a=1&api_key=***&X-Signature=***&sig=***&auth=***&client_secret=***#f",
        ),
        ("host=db user=u password='a b' dbname=x", "host=db user=u password=*** dbname=x"),
        ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://u@h/db and http://h:8080/p x@y",
            "postgresql://u@h/db and http://h:8080/p x@y",
        ),
        ("a line with nothing secret", "a line with nothing secret"),
    ],
)
def test_redact_masks_passwords_and_tokens(raw: str, masked: str) -> None:
    assert redact(raw) == masked
    assert redact(masked) == masked


def test_safe_url_is_sqlalchemys_rendering_without_the_password() -> None:
    url = "postgresql+psycopg://bob:S3CRET@db:5432/prod?options=-csearch_path%3Dx"
    assert safe_url(url) == "postgresql+psycopg://bob:***@db:5432/prod?options=-csearch_path%3Dx"
    assert safe_url("sqlite:///./halfmq.db") == "sqlite:///./halfmq.db"


class _Url:
    """Like httpx.URL: formatted with %s, not a str."""

    def __str__(self) -> str:
        return "http://user:PW@h/cb?token=TOK"


def test_the_filter_masks_arguments_messages_and_tracebacks() -> None:
    secrets = RedactSecrets()
    record = logging.LogRecord(
        "httpx", logging.INFO, __file__, 1, "HTTP Request: %s %s %d", ("POST", _Url(), 200), None
    )
    assert secrets.filter(record)
    assert record.getMessage() == "HTTP Request: POST http://user:***@h/cb?token=*** 200"
    assert record.args is not None
    assert record.args[2] == 200, "arguments stay arguments"
    try:
        raise ConnectionError('failed: "dbname=x password=P4SS"')
    except ConnectionError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "store", None, sys.exc_info())
    secrets.filter(failed)
    assert failed.exc_text is not None
    assert "P4SS" not in logging.Formatter().format(failed)
    assert "password=***" in failed.exc_text


_EVERY_LOGGER = """
import logging, uvicorn
from broker_service import logs
logging.basicConfig(level="DEBUG")
config = uvicorn.Config(lambda *a: None, log_level="debug")  # uvicorn's handlers, as in serve
logs.install_redaction()
url = "postgresql+psycopg://bob:SECRET1@db/x?sslpassword=SECRET2&token=SECRET3"
for name in ("uvicorn.error", "uvicorn", "sqlalchemy.engine", "httpx", "halfmq.store", ""):
    logging.getLogger(name).warning("connecting to %s as %s", url, name or "root")
try:
    raise OSError("password=SECRET4 refused")
except OSError:
    logging.getLogger("halfmq.api").exception("failed")
"""


def test_the_filter_is_on_every_handler_of_a_broker_process() -> None:
    """The entry point's wiring, in a process of its own: root's handler and uvicorn's."""
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_LOGGER], capture_output=True, text=True, timeout=60
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert output.count("bob:***@db") == 6, output
    assert "password=***" in output
    assert "SECRET" not in output


# -- a broker process's log holds no password ---------------------------------------------------


@pytest.fixture
def password_url(pg_url: str) -> Iterator[tuple[str, str]]:
    """A migrated schema reached as a role of its own, with a password in the URL (the server
    trusts every local connection: the password is never checked, only carried)."""
    migrate.upgrade(pg_url)
    role = f"halfmq_pw_{uuid.uuid4().hex[:10]}"
    secret = f"Pw{uuid.uuid4().hex}"
    schema = make_url(pg_url).query["options"].split("=", 1)[1]
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'"))
        conn.execute(text(f'GRANT ALL ON SCHEMA "{schema}" TO {role}'))
        conn.execute(text(f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO {role}'))
        conn.execute(text(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}'))
    url = make_url(pg_url).set(username=role, password=secret)
    try:
        yield url.render_as_string(hide_password=False), secret
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


@pytest.mark.postgres
def test_a_broker_on_a_password_url_never_logs_the_password(
    password_url: tuple[str, str], tmp_path: Path
) -> None:
    url, secret = password_url
    log = tmp_path / "broker.log"
    broker = BrokerProcess(url, free_port(), log, "--log-level", "debug")
    broker.start()
    try:
        with httpx.Client(base_url=broker.url, timeout=10) as client:
            assert client.post("/v1/topics", json={"name": "t", "queues": 1}).status_code == 201
            assert client.post("/v1/topics/t/messages", json={"body": "x"}).status_code == 201
            assert client.get("/v1/topics").status_code == 200
    finally:
        broker.stop()
    text_ = log.read_text()
    assert "broker ready on postgresql+psycopg://" in text_
    assert ":***@127.0.0.1" in text_
    assert secret not in text_


def test_a_broker_whose_store_is_unreachable_shows_no_password(tmp_path: Path) -> None:
    secret = f"Pw{uuid.uuid4().hex}"
    url = f"postgresql+psycopg://halfmq:{secret}@127.0.0.1:{free_port()}/nowhere"
    log = tmp_path / "broker.log"
    broker = BrokerProcess(url, free_port(), log)
    broker.start_unready()
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"{broker.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, 30, "the broker to answer /healthz")
        ready = httpx.get(f"{broker.url}/readyz", timeout=10)
        error = assert_envelope(ready, 503, "NOT_READY")
        assert secret not in ready.text
        assert "unreachable" in error["message"]
        sent = httpx.post(f"{broker.url}/v1/topics", json={"name": "t"}, timeout=10)
        assert sent.status_code == 503
        assert secret not in sent.text
    finally:
        broker.stop()
    text_ = log.read_text()
    assert "not ready" in text_
    assert "halfmq:***@127.0.0.1" in text_
    assert secret not in text_


class _CheckAnswerer(BaseHTTPRequestHandler):
    """A producer's check endpoint: answers COMMIT and remembers what it was sent."""

    seen: list[str] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        self.seen.append(self.path)
        body = json.dumps({"state": "COMMIT"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def check_endpoint() -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []
    handler = type("Answerer", (_CheckAnswerer,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_pushed_check_logs_neither_the_callbacks_password_nor_its_token(
    sqlite_url: str, tmp_path: Path, check_endpoint: tuple[int, list[str]]
) -> None:
    migrate.upgrade(sqlite_url)
    port, seen = check_endpoint
    password, token = f"Pw{uuid.uuid4().hex}", f"Tok{uuid.uuid4().hex}"
    callback = f"http://bob:{password}@127.0.0.1:{port}/checks?token={token}"
    log = tmp_path / "broker.log"
    broker = BrokerProcess(sqlite_url, free_port(), log, *FAST, "--log-level", "debug")
    broker.start()
    try:
        with httpx.Client(base_url=broker.url, timeout=10) as client:
            client.post("/v1/topics", json={"name": "t", "queues": 1})
            beat = client.post(
                "/v1/producer-groups/bob/heartbeat",
                json={"client_id": "bob-1", "callback_url": callback},
            )
            assert beat.status_code == 200, beat.text
            half = client.post(
                "/v1/transactions", json={"topic": "t", "producer_group": "bob", "body": "x"}
            )
            assert half.status_code == 201, half.text
            txid = half.json()["transaction_id"]

            def committed() -> bool:
                state = client.get(f"/v1/transactions/{txid}").json()["state"]
                return bool(state == "COMMITTED")

            wait_until(committed, 30, "the pushed check to commit the half")
    finally:
        broker.stop()
    assert seen, "the check went to the callback"
    assert seen[0] == f"/checks?token={token}"
    text_ = log.read_text()
    assert f"check of {txid} answered COMMIT" in text_
    assert password not in text_
    assert token not in text_


# -- one broker process over real HTTP for the edge's checks -------------------------------------


State = LocalTransactionState


@pytest.fixture(scope="module")
def edge_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    folder = tmp_path_factory.mktemp("edge")
    url = f"sqlite:///{folder / 'broker.db'}"
    migrate.upgrade(url)
    broker = BrokerProcess(url, free_port(), folder / "broker.log", "--no-scheduler")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
def test_loopback_hosts_pass(edge_broker: BrokerProcess, host: str) -> None:
    response = httpx.get(
        f"{edge_broker.url}/healthz", headers={"Host": f"{host}:{edge_broker.port}"}, timeout=10
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("host", ["evil.example", "evil.example:9876", "localhost.evil.example"])
def test_another_host_is_refused_in_the_envelope(edge_broker: BrokerProcess, host: str) -> None:
    """A DNS-rebinding page: evil.example re-pointed at 127.0.0.1, in the victim's browser."""
    for method, path in [("GET", "/v1/topics"), ("POST", "/v1/topics"), ("GET", "/nowhere")]:
        response = httpx.request(
            method, f"{edge_broker.url}{path}", headers={"Host": host}, json={"name": "x"}
        )
        error = assert_envelope(response, 400, "INVALID_HOST")
        assert error["detail"]["host"] == host


def test_a_64_kib_header_is_431(edge_broker: BrokerProcess) -> None:
    big = httpx.get(f"{edge_broker.url}/healthz", headers={"x-big": "a" * 64 * 1024}, timeout=10)
    assert_envelope(big, 431, "HEADERS_TOO_LARGE")
    fits = httpx.get(f"{edge_broker.url}/healthz", headers={"x-fits": "a" * 8 * 1024}, timeout=10)
    assert fits.status_code == 200


def test_an_endless_header_is_refused_before_it_ends(edge_broker: BrokerProcess) -> None:
    """httptools would buffer a header line of any length: the broker answers 431 and closes the
    connection while the head is still arriving, having read little more than its bound."""
    with socket.create_connection(("127.0.0.1", edge_broker.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
        sent = 0
        with contextlib.suppress(OSError):  # the broker closes on us mid-send
            while sent < 64 * 1024 * 1024:
                sock.sendall(b"a" * 64 * 1024)
                sent += 64 * 1024
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert sent < 64 * 1024 * 1024, "the broker read 64 MiB of one header"
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert json.loads(body)["error"]["code"] == "HEADERS_TOO_LARGE"


def test_a_large_body_is_not_counted_as_head(edge_broker: BrokerProcess) -> None:
    """The bound counts the head only: a body sent in the same packets is not mistaken for it."""
    httpx.post(f"{edge_broker.url}/v1/topics", json={"name": "big-bodies", "queues": 1}, timeout=10)
    body = {"body": "y" * 200_000}
    response = httpx.post(f"{edge_broker.url}/v1/topics/big-bodies/messages", json=body, timeout=10)
    assert response.status_code == 201, response.text


def test_a_thousand_headers_are_431(edge_broker: BrokerProcess) -> None:
    many = [(f"x-h{i}", "v") for i in range(1000)]
    response = httpx.get(f"{edge_broker.url}/healthz", headers=many, timeout=10)
    error = assert_envelope(response, 431, "HEADERS_TOO_LARGE")
    assert error["detail"]["max_headers"] == 100
    few = [(f"x-h{i}", "v") for i in range(50)]
    assert httpx.get(f"{edge_broker.url}/healthz", headers=few, timeout=10).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/topics", "GET, POST"),
        ("POST", "/v1/topics/t", "GET, DELETE"),
        ("DELETE", "/healthz", "GET"),
        ("GET", "/v1/transactions/x/commit", "POST"),
    ],
)
def test_405_names_every_method_of_the_path(
    edge_broker: BrokerProcess, method: str, path: str, allowed: str
) -> None:
    response = httpx.request(method, f"{edge_broker.url}{path}", timeout=10)
    assert_envelope(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["allow"] == allowed


def test_deliver_at_beyond_max_delay_is_422(edge_broker: BrokerProcess) -> None:
    with httpx.Client(base_url=edge_broker.url, timeout=10) as client:
        client.post("/v1/topics", json={"name": "later", "queues": 1})
        far = {"body": "x", "deliver_at": "9999-12-31T23:59:59Z"}
        error = assert_envelope(
            client.post("/v1/topics/later/messages", json=far), 422, "DELIVER_AT_TOO_FAR"
        )
        assert error["detail"]["max_delay_seconds"] == DEFAULT_MAX_DELAY_SECONDS
        batch = {"messages": [{"body": "fine"}, far]}
        assert_envelope(
            client.post("/v1/topics/later/messages:batch", json=batch), 422, "DELIVER_AT_TOO_FAR"
        )
        half = {"topic": "later", "producer_group": "g", **far}
        assert_envelope(client.post("/v1/transactions", json=half), 422, "DELIVER_AT_TOO_FAR")
        just_over = _iso(datetime.now(UTC) + timedelta(seconds=DEFAULT_MAX_DELAY_SECONDS + 60))
        assert_envelope(
            client.post("/v1/topics/later/messages", json={"body": "x", "deliver_at": just_over}),
            422,
            "DELIVER_AT_TOO_FAR",
        )
        topic = client.get("/v1/topics/later").json()
        assert all(q["max_offset"] == 0 for q in topic["queue_offsets"]), (
            "the refused batch stored none"
        )

        within = _iso(datetime.now(UTC) + timedelta(days=2))
        sent = client.post("/v1/topics/later/messages", json={"body": "x", "deliver_at": within})
        assert sent.status_code == 201, sent.text
        assert sent.json()["deliver_at"].startswith(within[:16])
        half["deliver_at"] = within
        assert client.post("/v1/transactions", json=half).status_code == 201


def test_a_loopback_broker_does_not_warn(edge_broker: BrokerProcess) -> None:
    assert "owns the broker" not in edge_broker.log_path.read_text()


# -- the same rules in process --------------------------------------------------------------------


async def test_in_process_brokers_answer_their_own_host_and_refuse_others(
    sqlite_url: str,
) -> None:
    migrate.upgrade(sqlite_url)
    async with BrokerApp.start(database_url=sqlite_url, scheduler=False) as broker:
        assert (await broker.client.get("/healthz")).status_code == 200  # Host: broker
        refused = await broker.client.get("/healthz", headers={"Host": "evil.example"})
        assert_envelope(refused, 400, "INVALID_HOST")


async def test_allowed_hosts_setting_with_a_domain_wildcard(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    async with BrokerApp.start(
        database_url=sqlite_url, scheduler=False, allowed_hosts="*.example.com, broker.lan"
    ) as broker:
        for host, status in [
            ("a.example.com", 200),
            ("broker.lan:9876", 200),
            ("broker", 200),  # the address it was reached at (the transport's own)
            ("example.com.evil", 400),
            ("localhost", 400),  # not in an explicit list
        ]:
            response = await broker.client.get("/healthz", headers={"Host": host})
            assert response.status_code == status, (host, response.text)


async def test_max_delay_seconds_is_a_setting(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    async with BrokerApp.start(
        database_url=sqlite_url, scheduler=False, max_delay_seconds=60
    ) as broker:
        await broker.topic("t", queues=1)
        at = _iso(datetime.now(UTC) + timedelta(seconds=300))
        answer = await broker.client.post(
            "/v1/topics/t/messages", json={"body": "x", "deliver_at": at}
        )
        assert_envelope(answer, 422, "DELIVER_AT_TOO_FAR")
        soon = _iso(datetime.now(UTC) + timedelta(seconds=30))
        answer = await broker.client.post(
            "/v1/topics/t/messages", json={"body": "x", "deliver_at": soon}
        )
        assert answer.status_code == 201, answer.text


def test_the_domain_bounds_deliver_at_and_leaves_the_past_alone() -> None:
    sender = Sender(DomainConfig(max_delay_ms=1000), clock=lambda: 50_000)
    sender.check_draft(MessageDraft(b"x", deliver_at=51_000))
    sender.check_draft(MessageDraft(b"x", deliver_at=1))  # already due: delivered now
    with pytest.raises(InvalidRequest) as refused:
        sender.check_draft(MessageDraft(b"x", deliver_at=51_001))
    assert refused.value.code == "DELIVER_AT_TOO_FAR"


# -- settings: hosts, the exposure warning, TLS ----------------------------------------------------


def test_default_allowed_hosts_are_loopback_and_the_bind_name() -> None:
    assert allowed_hosts(BrokerSettings()) == ["localhost", "127.0.0.1", "::1"]
    assert allowed_hosts(BrokerSettings(host="0.0.0.0")) == ["localhost", "127.0.0.1", "::1"]
    assert allowed_hosts(BrokerSettings(host="broker.lan"))[-1] == "broker.lan"
    assert allowed_hosts(BrokerSettings(allowed_hosts="[::1], A.example")) == ["::1", "a.example"]
    with pytest.raises(ValueError, match="host pattern"):
        BrokerSettings(allowed_hosts=["api.*.example"])


@pytest.mark.parametrize(
    ("host", "acl", "warns"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("192.168.1.5", None, True),
        ("broker.lan", None, True),
        ("0.0.0.0", Path("plain_acl.yml"), False),
    ],
)
def test_the_exposure_warning(host: str, acl: Path | None, warns: bool) -> None:
    warning = exposure_warning(BrokerSettings(host=host, acl_file=acl))
    assert (warning is not None) == warns
    if warning is not None:
        assert "anyone who can reach this port owns the broker" in warning
        assert "--acl" in warning


def test_a_broker_on_every_interface_warns_at_start(sqlite_url: str, tmp_path: Path) -> None:
    migrate.upgrade(sqlite_url)
    log = tmp_path / "broker.log"
    broker = BrokerProcess(sqlite_url, free_port(), log, "--host", "0.0.0.0", "--no-scheduler")
    broker.start()
    broker.stop()
    warnings = [line for line in log.read_text().splitlines() if "owns the broker" in line]
    assert len(warnings) == 1, log.read_text()
    assert "WARNING" in warnings[0]
    assert "0.0.0.0" in warnings[0]


def test_acl_flag_and_environment_set_acl_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALFMQ_ACL_FILE", "/etc/halfmq/plain_acl.yml")
    assert BrokerSettings().acl_file == Path("/etc/halfmq/plain_acl.yml")
    result = CliRunner().invoke(cli, ["broker", "serve", "--help"], env={"COLUMNS": "300"})
    assert "--acl-file" in result.output
    assert "--acl " in result.output or "--acl\n" in result.output or ",--acl" in result.output


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def test_a_broker_serves_https_with_its_certificate(
    sqlite_url: str, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    migrate.upgrade(sqlite_url)
    cert, key = certificate
    port = free_port()
    broker = BrokerProcess(
        sqlite_url, port, tmp_path / "broker.log", "--no-scheduler",
        "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
    )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(cert))
    broker.start_unready()
    try:

        def healthy() -> bool:
            try:
                answer = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=trust, timeout=1)
            except httpx.HTTPError:
                return False
            return answer.status_code == 200

        wait_until(healthy, 30, "the broker to answer over TLS")
        assert httpx.get(f"https://127.0.0.1:{port}/readyz", verify=trust).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)  # no plain HTTP
        _a_producer_trusts_the_broker_only_with_verify(f"https://127.0.0.1:{port}", cert)
    finally:
        broker.stop()


def _a_producer_trusts_the_broker_only_with_verify(url: str, cert: Path) -> None:
    """The framework's ``verify=``: the broker's CA bundle lets a producer in; the system's CAs
    (the default) refuse a certificate they did not issue."""
    trust = ssl.create_default_context(cafile=str(cert))
    httpx.post(f"{url}/v1/topics", json={"name": "tls", "queues": 1}, verify=trust)
    trusting = TransactionProducer("tls-bank", [url], check=CheckMode.pull(), verify=str(cert))
    trusting.execute_local_transaction("tls")(lambda message, arg: State.COMMIT_MESSAGE)
    with trusting:
        sent = trusting.send_message_in_transaction(Message("tls", body="over TLS"))
    assert sent.resolution == "COMMITTED"
    doubting = TransactionProducer(
        "tls-bank", [url], check=CheckMode.pull(), retry=Retry(attempts=1)
    )
    doubting.execute_local_transaction("tls")(lambda message, arg: State.COMMIT_MESSAGE)
    with pytest.raises(HalfMQError, match=r"(?i)certificate"), doubting:
        doubting.send_message_in_transaction(Message("tls", body="refused"))


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--ssl-keyfile", "KEY"], "ssl_keyfile needs ssl_certfile"),
        (["--ssl-certfile", "CERT"], "ssl_certfile needs ssl_keyfile"),
        (["--ssl-certfile", "CERT", "--ssl-keyfile", "CERT"], "do not load"),
        (["--ssl-certfile", "missing.pem", "--ssl-keyfile", "KEY"], "is not a file"),
    ],
)
def test_a_half_or_broken_tls_pair_is_a_clear_error(
    certificate: tuple[Path, Path], flags: list[str], said: str
) -> None:
    cert, key = certificate
    argv = [{"KEY": str(key), "CERT": str(cert)}.get(flag, flag) for flag in flags]
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["broker", "serve", *argv], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "invalid settings" in result.output
    assert said in " ".join(result.output.split())
    assert time.monotonic() - start < 30
