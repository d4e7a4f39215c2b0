"""The async face's transport (httpx over aiohttp's pool, framework/transport.py) against real
sockets that answer badly: every way of getting no answer surfaces as the httpx error httpx's own
transport raises, so a call is retried and fails over to the next broker as on the sync face."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    BrokerUnavailableError,
    LocalTransactionState,
    Message,
    Retry,
    Timeout,
)
from framework.protocol import Call
from framework.signing import HalfmqAuth
from framework.transport import AsyncBrokerClient
from tests.integration.framework.conftest import FAST_FLAGS, PULL
from tests.integration.framework.helpers import await_resolved
from tests.integration.framework.signed_http import BOB, SMITH
from tests.integration.framework.test_acl_end_to_end import ACL, OPERATOR
from tests.support import BrokerProcess, free_port

State = LocalTransactionState

ONCE = Retry(attempts=1, backoff=0.01)
SHORT = Timeout(connect=1.0, read=0.5, write=1.0, pool=1.0)
Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def ping() -> Call[int]:
    return Call("GET", "/v1/ping", lambda answer: answer.status)


async def _request(reader: asyncio.StreamReader) -> None:
    """Read one request's head (the calls here send no body)."""
    while (await reader.readline()) not in (b"\r\n", b""):
        pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    await _close(writer)


async def not_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    await writer.drain()
    await _close(writer)


async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    await reader.read()  # no answer: until the client gives up (SHORT.read) and hangs up
    await _close(writer)


async def cut_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{")
    await writer.drain()
    await _close(writer)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    await writer.drain()
    await _close(writer)


async def _serve(behaviour: Behaviour) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(behaviour, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Behaviour], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(behaviour: Behaviour) -> str:
        server, url = await _serve(behaviour)
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def refused_url() -> str:
    with socket.socket() as sock:  # a port just freed: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        (hang_up, httpx.RemoteProtocolError),
        (not_http, httpx.RemoteProtocolError),
        (stall, httpx.ReadTimeout),
        (cut_short, httpx.ReadError),  # httpx's own: RemoteProtocolError
    ],
)
async def test_no_answer_is_an_httpx_error_and_the_broker_unavailable(
    serve: Callable[[Behaviour], Awaitable[str]], behaviour: Behaviour, error: type[Exception]
) -> None:
    client = AsyncBrokerClient([await serve(behaviour)], retry=ONCE, timeout=SHORT)
    try:
        with pytest.raises(BrokerUnavailableError) as raised:
            await client.call(ping())
    finally:
        await client.aclose()
    assert type(raised.value.__cause__) is error


async def test_a_refused_connection_is_a_connect_error() -> None:
    client = AsyncBrokerClient([refused_url()], retry=ONCE, timeout=SHORT)
    try:
        with pytest.raises(BrokerUnavailableError) as raised:
            await client.call(ping())
    finally:
        await client.aclose()
    assert type(raised.value.__cause__) is httpx.ConnectError


@pytest.mark.parametrize("behaviour", [hang_up, not_http, stall, cut_short])
async def test_a_call_fails_over_to_the_broker_that_answers(
    serve: Callable[[Behaviour], Awaitable[str]], behaviour: Behaviour
) -> None:
    brokers = [await serve(behaviour), refused_url(), await serve(answer)]
    client = AsyncBrokerClient(brokers, retry=Retry(attempts=3, backoff=0.01), timeout=SHORT)
    try:
        assert await client.call(ping()) == 204
    finally:
        await client.aclose()
    assert client.endpoints.current == 2  # sticky on the broker that answered


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, as the broker's TLS test makes one)."""
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


async def test_tls_is_checked_against_the_verify_given(certificate: tuple[Path, Path]) -> None:
    """``verify=`` (a CA bundle) reaches the transport; the default (the system's CAs) refuses a
    certificate they did not issue, as a connection error the caller sees, not a hang."""
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    trusting = AsyncBrokerClient([url], retry=ONCE, timeout=SHORT, verify=str(cert))
    doubting = AsyncBrokerClient([url], retry=ONCE, timeout=SHORT)
    try:
        assert await trusting.call(ping()) == 204
        with pytest.raises(BrokerUnavailableError, match=r"(?i)certificate") as raised:
            await doubting.call(ping())
        assert type(raised.value.__cause__) is httpx.ConnectError
    finally:
        await trusting.aclose()
        await doubting.aclose()
        server.close()
        await server.wait_closed()


async def test_signed_async_faces_over_real_http(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signed requests on the wire as aiohttp sends them, to a broker process with the ACL on: a
    half, its pulled check (a query holding a client id with characters a URL escapes), the
    commit, and the consumer's receive and ack."""
    from broker_service.store import migrate

    monkeypatch.delenv("HALFMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HALFMQ_SECRET_KEY", raising=False)
    (tmp_path / "acl.yml").write_text(ACL)
    migrate.upgrade(sqlite_url)
    flags = ("--acl", str(tmp_path / "acl.yml"), *FAST_FLAGS)
    broker = BrokerProcess(sqlite_url, free_port(), tmp_path / "broker.log", *flags)
    broker.start()
    try:
        async with httpx.AsyncClient(auth=HalfmqAuth(OPERATOR)) as operator:
            topic = {"name": "transfers", "queues": 1}
            signed = await operator.post(f"{broker.url}/v1/topics", json=topic)
        assert signed.status_code == 201, signed.text
        await _a_checked_transfer(broker.url)
    finally:
        broker.stop()


async def _a_checked_transfer(url: str) -> None:
    checked: list[str | None] = []
    received: list[str] = []
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[url], credentials=BOB, check=PULL, client_id="bob@host#1/a b+c"
    )
    producer.execute_local_transaction("transfers")(lambda m, arg: State.UNKNOW)

    @producer.check_local_transaction("transfers")
    async def check(message: Message) -> LocalTransactionState:
        checked.append(message.transaction_id)
        return State.COMMIT_MESSAGE

    consumer = AsyncPushConsumer(
        "smith-bank",
        brokers=[url],
        credentials=SMITH,
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
    )
    consumer.subscribe("transfers")(lambda m: received.append(m.body))
    async with producer, consumer:
        result = await producer.send_message_in_transaction(Message("transfers", body="x"))
        record = await await_resolved(producer, result.transaction_id)
        for _ in range(300):
            if received:
                break
            await asyncio.sleep(0.05)
    assert record["state"] == "COMMITTED"
    assert checked == [result.transaction_id]  # the signed poll for checks answered
    assert received == ["x"]
