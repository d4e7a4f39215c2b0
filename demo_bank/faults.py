"""The demo's fault hooks.  Inert unless the bank runs with ``DEMO_BANK_FAULTS=true``.

* :class:`CommitFaults` (Bob): a request header ``X-Demo-Fault`` asks for one transfer to fail
  after its local commit -- ``crash-after-commit`` kills the process (SIGKILL) right after the
  local commit, before the broker's commit is sent (an SQLAlchemy ``after_commit`` listener);
  ``drop-commit`` loses that transfer's commit request on the way to the broker (a wrapping httpx
  transport raises ``ConnectError`` for it, every retry), so only the check-back resolves it.
* :class:`FlakyCredits` (Smith): the first delivery of a seeded share of the transfers fails
  (RECONSUME_LATER through an exception); the retry succeeds.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading

import httpx
import orjson
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

FAULT_HEADER = "X-Demo-Fault"
CRASH_AFTER_COMMIT, DROP_COMMIT = "crash-after-commit", "drop-commit"
KINDS = frozenset({CRASH_AFTER_COMMIT, DROP_COMMIT})
_SESSION_KEY = "demo_fault"


class TransientFault(Exception):
    """Smith's handler failing on purpose (the demo's flaky first delivery)."""


class DroppingTransport(httpx.BaseTransport):
    """Loses the commit requests of chosen transactions, as a network would: the request never
    reaches the broker.  A check's commit (``from_check: true``) goes through."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self._doomed: set[str] = set()
        self._lock = threading.Lock()

    def drop_commit_of(self, transaction_id: str) -> None:
        with self._lock:
            self._doomed.add(transaction_id)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.rstrip("/").split("/")
        if parts[-1] == "commit" and len(parts) >= 2:
            with self._lock:
                doomed = parts[-2] in self._doomed
            if doomed and not orjson.loads(request.read() or b"{}").get("from_check"):
                raise httpx.ConnectError("commit dropped by the demo's fault hook", request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class CommitFaults:
    """Bob's hooks around the broker commit of one transfer."""

    def __init__(self, enabled: bool, transport: DroppingTransport) -> None:
        self.enabled = enabled
        self.transport = transport

    def accept(self, header: str | None) -> str | None:
        """The fault a request asked for, if faults are on and it names one."""
        return header if self.enabled and header in KINDS else None

    def arm(self, session: Session, transaction_id: str | None, fault: str | None) -> None:
        """Called inside the local transaction, once the debit is written."""
        if fault == DROP_COMMIT and transaction_id is not None:
            self.transport.drop_commit_of(transaction_id)
        elif fault == CRASH_AFTER_COMMIT:
            session.info[_SESSION_KEY] = fault

    def install(self, sessions: sessionmaker[Session]) -> None:
        """Kill the process right after a local commit that armed ``crash-after-commit``."""
        if not self.enabled:
            return

        @event.listens_for(sessions, "after_commit")
        def _after_commit(session: Session) -> None:
            if session.info.pop(_SESSION_KEY, None) == CRASH_AFTER_COMMIT:
                os.kill(os.getpid(), signal.SIGKILL)


class FlakyCredits:
    """Smith's flaky handler: a seeded ``percent`` of transfers fail their first delivery."""

    def __init__(self, percent: float, seed: int) -> None:
        self.percent = percent
        self.seed = seed

    def chosen(self, transfer_id: str) -> bool:
        digest = hashlib.sha256(f"{self.seed}:{transfer_id}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % 10_000 < self.percent * 100

    def maybe_fail(self, transfer_id: str, reconsume_times: int) -> None:
        if self.percent > 0 and reconsume_times == 0 and self.chosen(transfer_id):
            raise TransientFault(f"transfer {transfer_id}: first delivery fails (demo fault)")
