"""Helpers for tests: brokers in process and as subprocesses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from broker_service.app import build_app
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.sql_store import SqlStore

PG_BASE_URL = os.environ.get("HALFMQ_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


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
        app = build_app(config)
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
                yield cls(client, config, app)

    async def topic(self, name: str = "transfers", queues: int = 4) -> str:
        response = await self.client.post("/v1/topics", json={"name": name, "queues": queues})
        assert response.status_code in (200, 201), response.text
        return name


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


class BrokerProcess:
    """``python -m halfmq broker serve`` on a free port; stopped by PID."""

    def __init__(self, database_url: str, port: int, log_path: Path, *extra: str) -> None:
        self.database_url = database_url
        self.port = port
        self.log_path = log_path
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        self.start_unready()
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.process.returncode}: {self.log_path.read_text()}"
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"broker not ready after {timeout}s: {self.log_path.read_text()}")

    def start_unready(self) -> None:
        """Start the process without waiting for it to be ready (it may refuse to be)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "halfmq", "broker", "serve",
                    "--database-url", self.database_url, "--port", str(self.port),
                    "--host", "127.0.0.1", *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


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
