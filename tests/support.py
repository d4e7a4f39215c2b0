"""Helpers for tests: brokers in process and as subprocesses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, cast

import httpx
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from broker_service.app import build_app
from broker_service.memstore import MemoryStore
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.sql_store import SqlStore
from framework.signing import Credentials, HalfmqAuth
from halfmq.broker_process import BrokerProcess as BrokerProcess  # re-exported for the tests

PG_BASE_URL = os.environ.get("HALFMQ_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# The ``database_url`` that starts a ``BrokerApp`` on the in-memory store: a URL the settings
# take, which no store opens.
MEMORY_URL = "sqlite:///file:halfmq-memory-store?mode=memory&cache=shared&uri=true"


class MemoryBrokerStore(MemoryStore):
    """The in-memory store (broker_service/memstore) as ``broker_service.app`` composes a broker
    on it: beside the ports, the app opens its store, names its dialect, asks whether its schema
    is current, for a claims runner and for the writer whose commits the metrics time."""

    dialect = "memory"
    schema_current = True
    schema_reason = ""

    def __init__(self) -> None:
        super().__init__()
        self.writer = SimpleNamespace(on_commit=None)  # no group commit: nothing to time

    def open(self) -> None:
        """Nothing to open: the store is ready when made."""

    def claims_runner(self) -> None:
        """Units run one at a time: the consumer units go through ``write``."""
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class BrokerApp:
    client: httpx.AsyncClient
    settings: BrokerSettings
    app: FastAPI | None = None  # None for a broker in another process reached over HTTP

    @property
    def state(self) -> Any:
        """The app's state (its service, store, ...), for tests that look inside the broker."""
        assert self.app is not None, "the broker runs in another process"
        return self.app.state

    @classmethod
    @asynccontextmanager
    async def start(cls, **settings: Any) -> AsyncIterator[BrokerApp]:
        config = BrokerSettings(**settings)
        memory = MemoryBrokerStore() if settings.get("database_url") == MEMORY_URL else None
        app = build_app(config, store=cast(Any, memory))
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
                yield cls(client, config, app)

    async def topic(self, name: str = "transfers", queues: int = 4) -> str:
        response = await self.client.post("/v1/topics", json={"name": name, "queues": queues})
        assert response.status_code in (200, 201), response.text
        return name


# -- the ACL the ACL tests share (``acl_file`` and ``acl_app`` in tests/conftest.py) --------------

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
  - ::1
accounts:
  - accessKey: bob-bank-key
    secretKey: bob-bank-secret
    topicPerms:
      - transfers=PUB
    groupPerms:
      - bob-bank=PUB
  - accessKey: smith-bank-key
    secretKey: smith-bank-secret
    topicPerms:
      - transfers=SUB
    groupPerms:
      - smith-bank=SUB
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
  - accessKey: teller-key
    secretKey: teller-secret
    groupPerms:
      - bob-bank=PUB
  - accessKey: faraway-key
    secretKey: faraway-secret
    admin: true
    whiteRemoteAddress: 10.9.8.*
"""
BOB = Credentials("bob-bank-key", "bob-bank-secret")  # PUB on transfers and its group
SMITH = Credentials("smith-bank-key", "smith-bank-secret")  # SUB on transfers and its group
OPERATOR = Credentials("operator-key", "operator-secret")  # admin
TELLER = Credentials("teller-key", "teller-secret")  # Bob's producer group, but no topic
FARAWAY = Credentials("faraway-key", "faraway-secret")  # admin, from 10.9.8.* only


def signed(broker: BrokerApp, credentials: Credentials) -> httpx.AsyncClient:
    """A client of the in-process ``broker`` that signs every request with ``credentials``."""
    return httpx.AsyncClient(
        transport=broker.client._transport, base_url="http://broker", auth=HalfmqAuth(credentials)
    )


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[SqlStore]:
    """The SQL store on ``url``, migrated and open (its writer running); closed afterwards."""
    migrate.upgrade(url)
    store = SqlStore(BrokerSettings(database_url=url))
    store.open()
    try:
        yield store
    finally:
        store.close()


class Program:
    """A test program (``python -m tests.producer_app ...``) run as a real process; its first line
    of output is read back; it is stopped by PID."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def first_line(self, timeout: float = 20) -> str:
        assert self.process.stdout is not None
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not result or not result[0]:
            raise RuntimeError(f"{self.process.args} printed nothing (exit {self.process.poll()})")
        return result[0].decode().strip()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` (bounded) until it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class _Committer(BaseHTTPRequestHandler):
    """A producer's check endpoint: answers every POST COMMIT and notes its path."""

    seen: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.seen.append(self.path)
        body = b'{"state": "COMMIT"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def check_endpoint(host: str = "127.0.0.1") -> Iterator[tuple[int, list[str]]]:
    """A check endpoint on ``host`` (any 127.0.0.x on loopback): its port, and the paths POSTed
    to it; stopped on exit."""
    seen: list[str] = []
    server = ThreadingHTTPServer((host, 0), type("Committer", (_Committer,), {"seen": seen}))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
