"""Concurrent transfers against Bob's bank, and the faults fired at set points of the run.

Each transfer is sent until Bob gives an answer: a refused connection (Bob is down) or a 503 (the
broker is down; no half was stored, so nothing was debited) is sent again once Bob is back; a
connection that breaks after the request went out leaves the transfer *in doubt* -- the banks'
databases tell what became of it."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from demo_bank.faults import FAULT_HEADER
from demo_bank.plan import Plan, TransferSpec, crash_transfer
from demo_bank.processes import Service

COMMITTED, ROLLED_BACK, IN_DOUBT, GAVE_UP = "committed", "rolled back", "in doubt", "gave up"
SEND_DEADLINE = 120.0
CRASH_INDEX = -1  # the crash transfer's place in ``Traffic.fates``


def transfer_id(index: int, attempt: int = 0) -> str:
    """The id the runner gives a transfer (Bob takes it), so it can follow each one in the
    databases, answered or not; a transfer sent again after a 503 gets a new one, since the
    broker may hold a half of the first try that the check-back then rolls back."""
    base = "t-crash" if index == CRASH_INDEX else f"t-{index:05d}"
    return base if attempt == 0 else f"{base}.{attempt}"


@dataclass(frozen=True, slots=True)
class Fate:
    """What the runner knows of one transfer: its kind (the plan's), the id of each try that
    reached Bob (the last is the one answered), and Bob's answer to the last."""

    kind: str
    ids: tuple[str, ...]
    outcome: str  # committed | rolled back | in doubt | gave up
    pending: bool = False  # committed locally, the broker's commit left to the check-back


@dataclass(eq=False)
class Traffic:
    """The plan's transfers, sent to Bob by ``concurrency`` threads; ``say`` tells a line,
    ``advance`` the progress."""

    bob: Service
    plan: Plan
    concurrency: int
    say: Callable[[str], None]
    advance: Callable[[], None]

    def __post_init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.fates: dict[int, Fate] = {}  # plan index (the crash transfer: CRASH_INDEX) -> fate
        self.resent = 0
        self.bob_up = threading.Event()
        self.bob_up.set()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._done = 0
        self._client = httpx.Client(
            timeout=httpx.Timeout(20, connect=5),
            limits=httpx.Limits(max_connections=self.concurrency * 2),
        )

    def close(self) -> None:
        self._client.close()

    @property
    def done(self) -> int:
        return self._done

    def send_all(self, on_progress: Callable[[int], None]) -> None:
        """Send every planned transfer; ``on_progress(done)`` runs in the caller's thread."""
        pool = ThreadPoolExecutor(self.concurrency, "demo-transfer")
        try:
            futures = [pool.submit(self._send, spec) for spec in self.plan.transfers]
            while not all(f.done() for f in futures):
                on_progress(self._done)
                time.sleep(0.02)
            for future in futures:
                future.result()
        except BaseException:  # Ctrl-C, SIGTERM: drop what is queued, do not wait for requests
            self.stopping.set()  # in flight (stopping Bob ends them)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        on_progress(self._done)

    def _record(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            self._done += 1
        self.advance()

    def _send(self, spec: TransferSpec) -> None:
        self._record(self.send_one(spec))

    def send_one(self, spec: TransferSpec) -> str:
        outcome, ids, pending = self._send_until_answered(spec)
        with self._lock:
            self.fates[spec.index] = Fate(spec.kind, tuple(ids), outcome, pending)
        return outcome

    def _send_until_answered(self, spec: TransferSpec) -> tuple[str, list[str], bool]:
        """Bob's answer, the ids of the tries that reached him, whether the commit is pending."""
        headers = {FAULT_HEADER: spec.fault} if spec.fault else {}
        deadline = time.monotonic() + SEND_DEADLINE
        ids: list[str] = []
        while time.monotonic() < deadline and not self.stopping.is_set():
            if not self.bob_up.wait(0.2):
                continue
            sent_as = transfer_id(spec.index, len(ids))
            body = {"from": spec.from_account, "to": spec.to_account, "amount": spec.amount,
                    "transfer_id": sent_as}  # fmt: skip
            try:
                response = self._client.post(
                    f"{self.bob.url}/transfers", json=body, headers=headers
                )
            except httpx.ConnectError:  # not sent: Bob is down, send it again when he is back
                time.sleep(0.1)
                continue
            except httpx.TransportError:  # sent, and no answer came
                return IN_DOUBT, [*ids, sent_as], False
            ids.append(sent_as)
            if response.status_code == 503:
                # The broker is down: no debit (the half, if one was stored, is rolled back).
                with self._lock:
                    self.resent += 1
                time.sleep(0.2)
                continue
            if response.status_code == 201:
                pending = response.json().get("state") != "COMMITTED"
                return COMMITTED, ids, pending
            if response.status_code == 422:
                return ROLLED_BACK, ids, False
            return IN_DOUBT, ids, False
        return GAVE_UP, ids, False

    # -- the process faults ------------------------------------------------------------------------

    def kill_bob_after_commit(self, seed: int) -> float:
        """Send the transfer Bob dies on, wait for the death, restart him; the seconds it took."""
        began = time.monotonic()
        pid = self.bob.pid
        outcome = self.send_one(crash_transfer(seed))
        if not self.bob.wait_exit(15):
            raise RuntimeError("Bob survived his crash-after-commit fault")
        self.bob_up.clear()
        try:
            self.bob.start()
        finally:
            self.bob_up.set()
        took = time.monotonic() - began
        self.say(
            f"Bob (pid {pid}) SIGKILLed itself right after the local commit of a transfer, "
            f"before the broker's commit (the runner saw: {outcome}); restarted in {took:.1f}s"
        )
        return took
