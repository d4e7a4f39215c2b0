"""The gRPC tests' helpers: a broker process with its gRPC port, and the unmodified RocketMQ
Python client run as its own process (``rmq_client.py``), with a temporary ``HOME`` (it writes
its logs under ``~/logs``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support import BrokerProcess, free_port, wait_until

CLIENT = Path(__file__).with_name("rmq_client.py")
# The Node.js client's script; its node_modules come from `npm ci` in this folder (make test).
NODE_CLIENT = Path(__file__).with_name("node") / "rmq_client.js"
# Check-back within seconds: a half is first checked 2 s after it was sent, rounds every second.
FAST_CHECKS = (
    "--transaction-timeout-seconds", "2",
    "--transaction-check-interval-seconds", "1",
)  # fmt: skip


class GrpcBroker(BrokerProcess):
    """``python -m halfmq broker serve`` with ``--grpc-port``."""

    def __init__(self, database_url: str, log_path: Path, *extra: str, **kwargs: Any) -> None:
        self.grpc_port = free_port()
        super().__init__(
            database_url,
            free_port(),
            log_path,
            "--grpc-port",
            str(self.grpc_port),
            *extra,
            **kwargs,
        )

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def topic(self, name: str, *, queues: int = 2, order: bool = False, **auth: Any) -> None:
        response = httpx.post(
            f"{self.url}/v1/topics", json={"name": name, "queues": queues, "order": order}, **auth
        )
        assert response.status_code in (200, 201), response.text

    def get(self, path: str, **auth: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", **auth)
        assert response.status_code == 200, response.text
        return response.json()


class RmqClient:
    """One run of ``rmq_client.py``; its events (JSON lines) are read as they come."""

    def __init__(
        self,
        home: Path,
        endpoint: str,
        scenario: str,
        *args: str,
        env: dict[str, str] | None = None,
        node: bool = False,
    ) -> None:
        """``node``: the Node.js client instead of the Python one."""
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        program = ["node", str(NODE_CLIENT)] if node else [sys.executable, str(CLIENT)]
        if node and not (NODE_CLIENT.parent / "node_modules").is_dir():
            raise RuntimeError(f"run `npm ci` in {NODE_CLIENT.parent} (make test does)")
        self.process = subprocess.Popen(
            [*program, endpoint, scenario, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(home), **(env or {})},
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """The client's JSON lines; a line cut short by a kill is not one, and a pipe closed by
        :meth:`kill` ends the reading."""
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                if line.startswith("{"):
                    try:
                        self.events.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        except ValueError:  # read from a closed pipe: the client was killed and its pipe closed
            return

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == event]

    def wait_for(self, event: str, count: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
        wait_until(lambda: len(self.of(event)) >= count, timeout, f"{count} {event} event(s)")
        return self.of(event)

    def finish(self, timeout: float = 90) -> list[dict[str, Any]]:
        self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return self.events

    def kill(self) -> None:
        """Stop it (SIGKILL) if it still runs, and close its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def run_client(
    home: Path,
    endpoint: str,
    scenario: str,
    *args: str,
    env: dict[str, str] | None = None,
    node: bool = False,
) -> list[dict[str, Any]]:
    """Run one scenario to its end; its events."""
    client = RmqClient(home, endpoint, scenario, *args, env=env, node=node)
    try:
        return client.finish()
    finally:
        client.kill()


@contextmanager
def running_client(
    home: Path, endpoint: str, scenario: str, *args: str, node: bool = False
) -> Iterator[RmqClient]:
    client = RmqClient(home, endpoint, scenario, *args, node=node)
    try:
        yield client
    finally:
        client.kill()


def client_log(home: Path) -> str:
    """What the client wrote to its own log (~/logs/rocketmq_python/): the broker's statuses."""
    return "".join(p.read_text(errors="replace") for p in home.glob("logs/**/*.log"))


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "error"]
