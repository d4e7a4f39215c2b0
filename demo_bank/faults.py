"""The demo's fault hooks.  Inert unless the bank runs with ``DEMO_BANK_FAULTS=true``.

* :class:`CommitFaults` (Bob): a request header ``X-Demo-Fault`` asks for one transfer to fail
  after its local commit -- ``crash-after-commit`` kills the process (SIGKILL) right after the
  local commit, before the broker's commit is sent (an SQLAlchemy ``after_commit`` listener);
  ``drop-commit`` loses that transfer's commit request on the way to the broker (a wrapping httpx
  transport raises ``ConnectError`` for it, every retry, or takes it out of a request it shares
  with other decisions), so only the check-back resolves it.
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

from framework.signing import AUTHORIZATION_HEADER, Credentials, sign_headers

FAULT_HEADER = "X-Demo-Fault"
CRASH_AFTER_COMMIT, DROP_COMMIT = "crash-after-commit", "drop-commit"
KINDS = frozenset({CRASH_AFTER_COMMIT, DROP_COMMIT})
_SESSION_KEY = "demo_fault"


class TransientFault(Exception):
    """Smith's handler failing on purpose (the demo's flaky first delivery)."""


DECISIONS_BATCH = "/v1/transactions/decisions:batch"
# A doomed commit's place in a shared request's answer: what a lost request leaves its caller
# with, a failure it retries (503) and then gives up on -- never the broker's answer.
_DROPPED = {
    "status": 503,
    "error": {"code": "COMMIT_DROPPED", "message": "commit dropped by the demo's fault hook"},
}


class DroppingTransport(httpx.BaseTransport):
    """Loses the commit requests of chosen transactions, as a network would: the request never
    reaches the broker.  A check's commit (``from_check: true``) goes through.

    The producer sends a commit alone (``POST /v1/transactions/{id}/commit``) or, when other
    decisions are on their way at the same moment, shares one request with them
    (``POST /v1/transactions/decisions:batch``).  Both are dropped: alone, the request fails
    to connect; shared, the doomed commit is taken out of the request (signed again with the
    producer's credentials, as its client would) and answered as failed, the others go on."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.credentials: Credentials | None = None  # the producer's, to sign a shared request
        self._doomed: set[str] = set()
        self._lock = threading.Lock()

    def drop_commit_of(self, transaction_id: str) -> None:
        with self._lock:
            self._doomed.add(transaction_id)

    def _is_doomed(self, decision: object) -> bool:
        if not isinstance(decision, dict) or decision.get("from_check"):
            return False
        if str(decision.get("decision", "")).upper() != "COMMIT":
            return False
        with self._lock:
            return decision.get("transaction_id") in self._doomed

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == DECISIONS_BATCH:
            return self._shared(request)
        parts = request.url.path.rstrip("/").split("/")
        if parts[-1] == "commit" and len(parts) >= 2:
            with self._lock:
                doomed = parts[-2] in self._doomed
            if doomed and not orjson.loads(request.read() or b"{}").get("from_check"):
                raise httpx.ConnectError("commit dropped by the demo's fault hook", request=request)
        return self.inner.handle_request(request)

    def _shared(self, request: httpx.Request) -> httpx.Response:
        decisions = orjson.loads(request.read() or b"{}").get("decisions")
        if not isinstance(decisions, list):
            return self.inner.handle_request(request)
        dropped = [self._is_doomed(d) for d in decisions]
        if not any(dropped):
            return self.inner.handle_request(request)
        kept = [d for d, drop in zip(decisions, dropped, strict=True) if not drop]
        answered: list[object] = []
        if kept:
            response = self.inner.handle_request(self._resigned(request, {"decisions": kept}))
            response.read()
            if response.status_code != 200:
                return response  # the whole request failed: each caller reads that
            answered = list(orjson.loads(response.content)["results"])
        results = iter(answered)
        body = {"results": [_DROPPED if drop else next(results) for drop in dropped]}
        return httpx.Response(200, json=body, request=request)

    def _resigned(self, request: httpx.Request, body: dict[str, object]) -> httpx.Request:
        content = orjson.dumps(body)
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("content-length", AUTHORIZATION_HEADER.lower())
        }
        if self.credentials is not None:
            path, _, query = request.url.raw_path.decode("ascii").partition("?")
            headers |= sign_headers(self.credentials, request.method, path, query, content)
        return httpx.Request(request.method, request.url, headers=headers, content=content)

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
