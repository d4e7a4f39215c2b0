"""The demo's real processes: the broker and the two banks, each started with ``sys.executable``
in its own session (a Ctrl-C reaches only the runner, which then stops them), told apart by PID,
and stopped by PID -- SIGTERM then SIGKILL -- or killed on purpose with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServiceError(RuntimeError):
    """A service did not come up (its log's tail is in the message)."""


class Service:
    """One process on 127.0.0.1:``port``; ready when ``GET ready_path`` answers 200."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        ready_path: str = "/healthz",
    ) -> None:
        self.name = name
        self.argv = [sys.executable, *argv]
        self.port = port
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.ready_path = ready_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.starts += 1
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServiceError(f"{self.name} exited at start-up:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ServiceError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def wait_exit(self, timeout: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL by PID: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM by PID (no wait)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)

    def stop(self, grace: float = 10) -> None:
        """SIGTERM by PID, SIGKILL after ``grace`` seconds."""
        if self.process is None:
            return
        self.terminate()
        if not self.wait_exit(grace):
            self.kill()
        self.process = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def stop_all(services: Sequence[Service], grace: float = 10) -> None:
    """SIGTERM to every one at once, SIGKILL to those still there after ``grace`` seconds."""
    for service in services:
        with contextlib.suppress(OSError):
            service.terminate()
    deadline = time.monotonic() + grace
    for service in services:
        with contextlib.suppress(OSError):
            if not service.wait_exit(max(0.0, deadline - time.monotonic())):
                service.kill()
            service.process = None


def broker_service(
    database_url: str, port: int, log_path: Path, settings: dict[str, str]
) -> Service:
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]
    argv = ["-m", "halfmq", "broker", "serve", "--database-url", database_url]
    argv += ["--host", "127.0.0.1", "--port", str(port), *flags]
    return Service("broker", argv, port, log_path, ready_path="/readyz")


def bank_service(bank: str, port: int, log_path: Path, env: dict[str, str]) -> Service:
    argv = ["-m", "demo_bank", bank, "--port", str(port)]
    return Service(bank, argv, port, log_path, env=env)
