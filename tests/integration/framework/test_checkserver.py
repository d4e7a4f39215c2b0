"""The built-in push check servers (thread and asyncio) over real sockets: a burst of the broker's
checks is answered whole within the concurrency bound, the listen backlog is the one asked for,
what is not a check answers 400, and closing drops the checks still waiting instead of draining
them."""

from __future__ import annotations

import asyncio
import http.client
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from broker_service.domain.transactions.checkback import CheckRequest, check_payload
from framework.checkserver import (
    BACKLOG,
    MAX_CONCURRENT_CHECKS,
    start_async_server,
    start_thread_server,
)
from framework.message import LocalTransactionState, Message
from tests.support import wait_until

State = LocalTransactionState
BURST = 200
STATES = (State.COMMIT_MESSAGE, State.ROLLBACK_MESSAGE, State.UNKNOW)
# What each client got: (status, JSON answer), or the name of the error that ended its connection.
Reply = tuple[int, Any] | str


class Gauge:
    """The checks the answer callback saw, and how many it ran at once (at most, and now)."""

    def __init__(self) -> None:
        self.seen: list[Message] = []
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    @contextmanager
    def running(self, message: Message) -> Iterator[None]:
        with self._lock:
            self.seen.append(message)
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1


def check_body(n: int) -> bytes:
    """The broker's own push body for check ``n``."""
    request = CheckRequest(
        transaction_id=f"tx-{n}",
        producer_group="bob-bank",
        msg_id=f"msg-{n}",
        topic="transfers",
        tags="debit",
        keys=(f"t-{n}",),
        body=b'{"amount": 100}',
        encoding="utf-8",
        properties={"origin": "test"},
        check_times=2,
    )
    return orjson.dumps(check_payload(request))


def received(n: int) -> Message:
    """Check ``n`` as the answer callback must see it."""
    return Message(
        topic="transfers",
        body='{"amount": 100}',
        tags="debit",
        keys=(f"t-{n}",),
        properties={"origin": "test", "CHECK_TIMES": "2"},
        msg_id=f"msg-{n}",
        transaction_id=f"tx-{n}",
    )


def number(message: Message) -> int:
    return int((message.transaction_id or "").removeprefix("tx-"))


def state_for(message: Message) -> LocalTransactionState:
    """Each check gets its own answer, so a reply that went to the wrong client shows."""
    return STATES[number(message) % len(STATES)]


def expected(n: int) -> Reply:
    return 200, {"state": STATES[n % len(STATES)].check_answer}


def post(url: str, body: bytes, ready: threading.Barrier) -> Reply:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    ready.wait()
    try:
        connection.request("POST", parts.path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, orjson.loads(response.read())
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        connection.close()


def post_all(url: str, bodies: list[bytes]) -> list[Reply]:
    """POST every body at once, one connection and one thread each, as a broker burst does."""
    replies: list[Reply] = [""] * len(bodies)
    ready = threading.Barrier(len(bodies), timeout=30)

    def client(n: int) -> None:
        replies[n] = post(url, bodies[n], ready)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return replies


def listen_backlog(sock: Any) -> int:
    """The accept queue the kernel gave a listening socket (Linux reports it in TCP_INFO)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("8B6I", info)[13])  # tcpi_sacked: sk_max_ack_backlog


def expected_backlog() -> int:
    return min(BACKLOG, int(Path("/proc/sys/net/core/somaxconn").read_text()))


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads the backlog from TCP_INFO")


# -- the thread server -------------------------------------------------------------------------


@pytest.mark.parametrize("max_workers", [8, None])
def test_thread_server_answers_a_burst_within_the_bound(max_workers: int | None) -> None:
    bound = max_workers or MAX_CONCURRENT_CHECKS
    gauge = Gauge()

    def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            time.sleep(0.05)
        return state_for(message)

    options = {} if max_workers is None else {"max_workers": max_workers}
    server, url = start_thread_server(answer, "127.0.0.1", 0, **options)
    try:
        replies = post_all(url, [check_body(n) for n in range(BURST)])
    finally:
        server.shutdown()
        server.server_close()
    assert replies == [expected(n) for n in range(BURST)]
    assert sorted(number(m) for m in gauge.seen) == list(range(BURST))
    assert all(m == received(number(m)) for m in gauge.seen)
    assert 1 < gauge.peak <= bound


@linux_only
def test_thread_server_listens_with_the_backlog() -> None:
    server, _ = start_thread_server(lambda m: State.UNKNOW, "127.0.0.1", 0)
    try:
        assert listen_backlog(server.socket) == expected_backlog()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"topic": "transfers"}', b""])
def test_thread_server_answers_400_to_what_is_not_a_check(body: bytes) -> None:
    gauge = Gauge()

    def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            return State.COMMIT_MESSAGE

    server, url = start_thread_server(answer, "127.0.0.1", 0)
    try:
        assert post_all(url, [body, check_body(0)]) == [
            (400, {"error": "not a check"}),
            (200, {"state": "COMMIT"}),
        ]
    finally:
        server.shutdown()
        server.server_close()
    assert [m.transaction_id for m in gauge.seen] == ["tx-0"]


def test_thread_server_closes_promptly_and_drops_the_waiting_checks() -> None:
    gauge = Gauge()

    def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            time.sleep(1)
        return State.COMMIT_MESSAGE

    server, url = start_thread_server(answer, "127.0.0.1", 0, max_workers=4)
    replies: list[Reply] = []
    clients = threading.Thread(
        target=lambda: replies.extend(post_all(url, [check_body(n) for n in range(40)]))
    )
    clients.start()
    wait_until(lambda: gauge.now == 4, 10, "every worker to be answering")
    started = time.monotonic()
    server.shutdown()
    server.server_close()
    assert time.monotonic() - started < 2
    clients.join(20)
    answered = [r for r in replies if r == (200, {"state": "COMMIT"})]
    assert (len(answered), len(replies)) == (4, 40)  # the 4 in flight finish, 36 are dropped
    assert len(gauge.seen) == 4
    for worker in server.workers:
        worker.join(2)
        assert not worker.is_alive()


# -- the asyncio server ------------------------------------------------------------------------


@pytest.mark.parametrize("max_concurrent", [8, None])
async def test_async_server_answers_a_burst_within_the_bound(max_concurrent: int | None) -> None:
    bound = max_concurrent or MAX_CONCURRENT_CHECKS
    gauge = Gauge()

    async def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            await asyncio.sleep(0.05)
        return state_for(message)

    options = {} if max_concurrent is None else {"max_concurrent": max_concurrent}
    server, url = await start_async_server(answer, "127.0.0.1", 0, **options)
    try:
        replies = await asyncio.to_thread(post_all, url, [check_body(n) for n in range(BURST)])
    finally:
        server.close()
        await server.wait_closed()
    assert replies == [expected(n) for n in range(BURST)]
    assert sorted(number(m) for m in gauge.seen) == list(range(BURST))
    assert all(m == received(number(m)) for m in gauge.seen)
    assert 1 < gauge.peak <= bound


@linux_only
async def test_async_server_listens_with_the_backlog() -> None:
    async def answer(message: Message) -> LocalTransactionState:
        return State.UNKNOW

    server, _ = await start_async_server(answer, "127.0.0.1", 0)
    try:
        assert listen_backlog(server.sockets[0]) == expected_backlog()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"topic": "transfers"}', b""])
async def test_async_server_answers_400_to_what_is_not_a_check(body: bytes) -> None:
    gauge = Gauge()

    async def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            return State.COMMIT_MESSAGE

    server, url = await start_async_server(answer, "127.0.0.1", 0)
    try:
        replies = await asyncio.to_thread(post_all, url, [body, check_body(0)])
    finally:
        server.close()
        await server.wait_closed()
    assert replies == [(400, {"error": "not a check"}), (200, {"state": "COMMIT"})]
    assert [m.transaction_id for m in gauge.seen] == ["tx-0"]


async def test_async_server_closes_promptly_and_drops_the_waiting_checks() -> None:
    gauge = Gauge()

    busy = asyncio.Event()

    async def answer(message: Message) -> LocalTransactionState:
        with gauge.running(message):
            if gauge.now == 4:
                busy.set()
            await asyncio.sleep(1)
        return State.COMMIT_MESSAGE

    server, url = await start_async_server(answer, "127.0.0.1", 0, max_concurrent=4)
    clients = asyncio.create_task(
        asyncio.to_thread(post_all, url, [check_body(n) for n in range(40)])
    )
    await asyncio.wait_for(busy.wait(), 10)
    started = time.monotonic()
    server.close()
    await server.wait_closed()
    assert time.monotonic() - started < 2
    replies = await asyncio.wait_for(clients, 20)
    answered = [r for r in replies if r == (200, {"state": "COMMIT"})]
    assert (len(answered), len(replies)) == (4, 40)  # the 4 in flight finish, 36 are dropped
    assert len(gauge.seen) == 4


# -- a broker that goes away before its answer -----------------------------------------------


def abandon(url: str, body: bytes) -> str:
    """POST a check as the broker does, then close the socket with a reset before the answer (a
    broker that timed out or died); return the client's own address as ``host:port``."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "", parts.port or 0), timeout=10)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    host, port = sock.getsockname()[:2]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
    sock.close()
    return f"{host}:{port}"


def lost_connection_lines(caplog: pytest.LogCaptureFixture, peer: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "halfmq.checks" and r.levelname == "WARNING" and peer in r.getMessage()
    ]


def assert_one_line_no_traceback(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], peer: str
) -> None:
    (line,) = lost_connection_lines(caplog, peer)
    assert "closed the connection" in line
    assert "Reset" in line or "Broken" in line, line
    assert all(r.exc_info is None for r in caplog.records)
    assert "Traceback" not in capsys.readouterr().err
    assert "Traceback" not in caplog.text


def test_thread_server_says_in_one_line_that_the_broker_left_before_its_answer(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level("WARNING")
    gone, answered = threading.Event(), threading.Event()

    def answer(message: Message) -> LocalTransactionState:
        gone.wait(20)
        answered.set()
        return State.COMMIT_MESSAGE

    server, url = start_thread_server(answer, "127.0.0.1", 0)
    try:
        peer = abandon(url, check_body(0))
        gone.set()
        assert answered.wait(20)
        wait_until(lambda: bool(lost_connection_lines(caplog, peer)), 20, "the server's line")
        assert post_all(url, [check_body(1)]) == [(200, {"state": "COMMIT"})], "still serving"
    finally:
        server.shutdown()
        server.server_close()
    assert_one_line_no_traceback(caplog, capsys, peer)


async def test_async_server_says_in_one_line_that_the_broker_left_before_its_answer(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level("WARNING")
    gone = asyncio.Event()

    async def answer(message: Message) -> LocalTransactionState:
        await asyncio.wait_for(gone.wait(), 20)
        return State.COMMIT_MESSAGE

    server, url = await start_async_server(answer, "127.0.0.1", 0)
    try:
        peer = await asyncio.to_thread(abandon, url, check_body(0))
        gone.set()
        for _ in range(200):  # bounded: the handler writes its answer and logs at once
            if lost_connection_lines(caplog, peer):
                break
            await asyncio.sleep(0.1)
        replies = await asyncio.to_thread(post_all, url, [check_body(1)])
        assert replies == [(200, {"state": "COMMIT"})], "still serving"
    finally:
        server.close()
        await server.wait_closed()
    assert_one_line_no_traceback(caplog, capsys, peer)
