"""A broker as a real process: ``python -m halfmq broker serve`` on 127.0.0.1.

The one implementation the drills (:mod:`drills.brokers`, :mod:`drills.failover`)
and the tests (``tests/support.py``) start brokers with: started with ``sys.executable``, its
output appended to a log file, ready once ``GET /readyz`` answers 200, and stopped by PID --
SIGTERM, then SIGKILL after a grace period -- or killed on purpose with SIGKILL (no shutdown code
runs: whatever the broker held in the store, its check-back claims, stays there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx


class BrokerProcess:
    """``python -m halfmq broker serve`` on ``127.0.0.1:port``, logging to ``log_path``; stopped
    by PID.

    ``extra``: more ``broker serve`` flags; ``env``: variables set over this process's own
    environment (``HALFMQ_...`` settings); ``broker_id``: the name it runs under
    (``HALFMQ_BROKER_ID``: in its logs, its claims and its traces), also used in this class's
    errors.  :meth:`start` starts it and waits until it is ready; :meth:`start_unready` and
    :meth:`wait_ready` are the two halves, to start several at once or one that may refuse to
    be ready."""

    def __init__(
        self,
        database_url: str,
        port: int,
        log_path: Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        broker_id: str = "",
    ) -> None:
        self.database_url = database_url
        self.port = port
        self.log_path = log_path
        self.extra = extra
        self.broker_id = broker_id
        self.env = dict(env or {})
        if broker_id:
            self.env["HALFMQ_BROKER_ID"] = broker_id
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 90) -> None:
        """Start the process and wait until it is ready; stopped again if it is not.  A broker
        starts in a second or two; a loaded machine has taken tens of seconds to import it."""
        self.start_unready()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

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
                env={**os.environ, **self.env},
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until ``/readyz`` answers 200; raise if the process exits or ``timeout`` passes
        first (the log's tail in the message)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                code = None if self.process is None else self.process.returncode
                raise RuntimeError(f"{self._name} exited with {code}: {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self._name} not ready after {timeout}s: {self.tail()}")

    @property
    def _name(self) -> str:
        return f"broker {self.broker_id}" if self.broker_id else "broker"

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far (all its threads), from /proc."""
        if self.process is None:
            return 0.0
        return process_cpu_seconds(self.process.pid)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, its claims stay in the store."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, grace: float = 10) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``grace`` seconds."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def tail(self, lines: int = 30) -> str:
        """The log's last ``lines`` lines."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def process_cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat; with ``reaped``,
    also its children's that exited and were waited for; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")
