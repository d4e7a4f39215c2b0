"""The check-back scheduler: rounds every ``transaction_check_interval_seconds``, and push checks
over HTTP.

The decisions are the domain's (:mod:`broker_service.domain.transactions.checkback`); this module
only drives them: it claims a round, POSTs push checks with a bounded time-out, applies the answers
as ``from_check`` commits and rollbacks, and wakes the pull long-polls of the instances it assigned
checks to (:class:`~broker_service.domain.transactions.pulls.PullHub`).

It times each push (``halfmq_check_seconds``) and tells the domain what came of it, a
:class:`~broker_service.domain.transactions.model.CheckOutcome` the domain traces as ``CHECKED``.
A push carries the half's W3C ``traceparent`` and ``tracestate`` properties as headers, so that the
producer's check handler joins the producer's own trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import httpx
import orjson

from broker_service.acl.signature import sign
from broker_service.domain.errors import DomainError
from broker_service.domain.transactions.checkback import (
    PushCheck,
    RoundReport,
    check_payload,
    claim_gone,
)
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import (
    CheckFailure,
    CheckOutcome,
    Decision,
    ProducerInstance,
    ResolvedBy,
)
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics
from broker_service.schedulers.failures import FailedRounds
from broker_service.schedulers.loop import SchedulerLoop

log = logging.getLogger("halfmq.checkback")

_ANSWERS = {"COMMIT": Decision.COMMIT, "ROLLBACK": Decision.ROLLBACK}
_PUSH_CONCURRENCY = 32
_TRACE_CONTEXT = ("traceparent", "tracestate")  # W3C trace context, as message properties
_TRACE_CONTEXT_MAX = 512  # tracestate: at most 32 members, 512 characters advised


class RoundLog:
    """What one round's checks did, told compactly: the first :attr:`DETAILED` checks of each
    outcome in a round get a line each (at their own level: a failure is a WARNING), the rest are
    only counted (and logged at DEBUG), and the round ends with one INFO line of counts by
    outcome.  At thousands of checks a round the log stays a few lines, and a fault among them is
    still seen."""

    DETAILED = 10

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def check(self, outcome: str, level: int, message: str, *args: object) -> None:
        self.counts[outcome] += 1
        detailed = self.counts[outcome] <= self.DETAILED
        log.log(level if detailed else logging.DEBUG, message, *args)

    def summary(self, claimed: int) -> None:
        if claimed or self.counts:
            outcomes = ", ".join(f"{count} {what}" for what, count in sorted(self.counts.items()))
            log.info("check round: %d due halves claimed; %s", claimed, outcomes or "no push")


@dataclass(eq=False)
class CheckBackScheduler(SchedulerLoop):
    """``secret_for``, with the ACL on: the secret of an access key, to sign each push check with
    the key its instance heartbeated with (its check server refuses an unsigned or forged
    check)."""

    task_name = "halfmq-checkback"

    service: TransactionService
    metrics: BrokerMetrics
    hub: PullHub
    _: KW_ONLY
    interval_seconds: float
    push_timeout_seconds: float
    round_max: int
    secret_for: Callable[[str], str | None] | None = None

    def __post_init__(self) -> None:
        self._http: httpx.AsyncClient | None = None
        self._wake = asyncio.Event()
        # when each instance last received a check from this broker (monotonic seconds)
        self._received_at: dict[tuple[str, str], float] = {}
        self._round = RoundLog()
        # a round a check interval: failed rounds are told in a few lines, not retried sooner
        self.rounds = FailedRounds.every(log, "check round", self.interval_seconds)

    def wake(self) -> None:
        """Run the next round now (an operator asked for a check)."""
        self._wake.set()

    def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=self.push_timeout_seconds)
        super().start()

    async def stop(self) -> None:
        await super().stop()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_round()
            except Exception as error:
                self.rounds.failed(error)
            else:
                self.rounds.succeeded()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_seconds)
            self._wake.clear()

    async def run_round(self) -> int:
        """Claim and check every due half (in slices of ``round_max``); return how many."""
        total, self._round = 0, RoundLog()
        # Claimed in slices that are pushed at once, so that every push of a slice happens well
        # inside the claim's time-out (a slice waits at most one push time-out).
        while total < self.round_max:
            size = min(_PUSH_CONCURRENCY, self.round_max - total)
            report = await self.service.claim_round(size)
            total += report.claimed
            self._observe(report)
            await self._push_all(report.pushes)
            if report.claimed < size:
                break
        self._round.summary(total)
        return total

    def _observe(self, report: RoundReport) -> None:
        skipped, unreachable = report.skipped_no_producer, report.skipped_unreachable
        if skipped:
            self.metrics.checks.labels(outcome="skipped_no_producer").inc(len(skipped))
            log.info("no live producer for %d due halves (not counted as checks)", len(skipped))
        if unreachable:
            self.metrics.checks.labels(outcome="skipped_unreachable").inc(len(unreachable))
            log.info(
                "no reachable producer for %d due halves (not counted as checks)", len(unreachable)
            )
        for transaction_id, reason in report.discarded:
            self.metrics.discards.labels(reason=reason).inc()
            log.warning("transaction %s DISCARDED (%s)", transaction_id, reason)
        for overdue in report.overdue:
            log.warning(
                "checks of transaction %s have reached no instance of %s for %d s (%s); "
                "it stays PREPARED",
                overdue.transaction_id,
                overdue.producer_group,
                (self.service.clock() - overdue.since) // 1000,
                overdue.error,
            )
        for (group, client_id), count in report.pull_assigned.items():
            self.metrics.checks.labels(outcome="assigned_pull").inc(count)
            self._round.counts["assigned to a pull"] += count
            self.hub.notify(group, client_id)

    async def _push_all(self, pushes: list[PushCheck]) -> None:
        if not pushes:
            return
        limit = asyncio.Semaphore(_PUSH_CONCURRENCY)

        async def one(check: PushCheck | None) -> None:
            async with limit:
                # a check that reached nobody goes to the next reachable instance, if any
                while check is not None:
                    check = await self.push(check)

        await asyncio.gather(*(one(check) for check in pushes))

    async def push(self, check: PushCheck) -> PushCheck | None:
        """Send one check and apply what came of it; return the same check redirected to another
        instance when this one could not be reached."""
        request, instance = check.request, check.instance
        assert self._http is not None
        assert instance.callback_url is not None
        self.metrics.checks.labels(outcome="sent").inc()
        body = orjson.dumps(check_payload(request))
        headers = {
            "Content-Type": "application/json",
            **_trace_context(request.properties),
            **self._signed(instance, body),
        }
        started = time.monotonic()

        def outcome(**what: Any) -> CheckOutcome:
            elapsed = time.monotonic() - started
            done = CheckOutcome("push", latency_ms=round(elapsed * 1000), **what)
            self.metrics.check_seconds.labels(mode="push", result=done.result).observe(elapsed)
            return done

        try:
            response = await self._http.post(instance.callback_url, content=body, headers=headers)
        except httpx.ReadTimeout:
            # sent in full, no answer in time: the producer has it (it may still be working)
            error = f"no answer within {self.push_timeout_seconds:g} s"
            await self._failed(check, outcome(failure=CheckFailure.TIMEOUT, error=error))
            return None
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return await self._undelivered(check, outcome(failure=_failure(exc), error=error))
        if response.is_error:
            status = response.status_code
            failed = outcome(
                failure=CheckFailure.ERROR, status=status, error=f"answered HTTP {status}"
            )
            await self._failed(check, failed)
            return None
        try:
            state = str(response.json().get("state", "")).upper()
        except (ValueError, AttributeError):
            error = "answered with no readable state"
            await self._failed(check, outcome(failure=CheckFailure.ERROR, error=error))
            return None
        answer = state if state in _ANSWERS else "UNKNOWN"
        await self._answered(check, outcome(answer=answer), state)
        return None

    def _signed(self, instance: ProducerInstance, body: bytes) -> dict[str, str]:
        if self.secret_for is None or instance.access_key is None:
            return {}
        secret = self.secret_for(instance.access_key)
        if secret is None:  # the key was removed since its heartbeat: send unsigned, refused
            return {}
        assert instance.callback_url is not None
        return sign(
            instance.access_key, secret, "POST", instance.callback_url, body, self.service.clock()
        )

    def _received(self, check: PushCheck) -> None:
        instance = check.instance
        self._received_at[(instance.producer_group, instance.client_id)] = time.monotonic()

    def _busy(self, check: PushCheck) -> bool:
        """An instance that received another check moments ago is up: a connection it could not
        take now is a full listen backlog, not an outage, so it is not set aside."""
        instance = check.instance
        key = (instance.producer_group, instance.client_id)
        return (
            time.monotonic() - self._received_at.get(key, -math.inf) < 2 * self.push_timeout_seconds
        )

    async def _answered(self, check: PushCheck, outcome: CheckOutcome, state: str) -> None:
        request = check.request
        self._received(check)
        self.metrics.checks.labels(outcome="answered").inc()
        answer = state if state in _ANSWERS else "UNKNOWN"
        self._round.check(
            f"answered {answer}",
            logging.INFO,
            "check of %s answered %s by %s (check %d)",
            request.transaction_id,
            state or "nothing",
            check.instance.client_id,
            request.check_times,
        )
        decision = _ANSWERS.get(state)
        if not await self.service.check_received(check, outcome):
            self._late(check, f"answer {answer}")
        if decision is None:
            return
        try:
            resolving = Resolving(
                request.transaction_id, decision, request.producer_group, ResolvedBy.CHECK
            )
            await self.service.resolve(resolving)
        except DomainError as error:
            # The producer (or an operator) decided first: the first decision stands.
            log.info("check answer for %s not applied: %s", request.transaction_id, error.message)

    async def _failed(self, check: PushCheck, outcome: CheckOutcome) -> None:
        """The producer received the check but gave no answer: counted, checked again later."""
        self._received(check)
        self.metrics.checks.labels(outcome="failed").inc()
        self._round.check(
            "failed",
            logging.WARNING,
            "check of %s at %s failed: %s",
            check.request.transaction_id,
            check.instance.client_id,
            outcome.error,
        )
        if not await self.service.check_received(check, outcome):
            self._late(check, "failure")

    def _late(self, check: PushCheck, what: str) -> None:
        """An outcome applied after this broker's claim on the half ended (the loop or the store
        stalled): another broker may have claimed and checked the half since, so it was only
        traced -- not counted, not rescheduled; a decision it carried is still applied once."""
        self._round.check(
            "late",
            logging.WARNING,
            "%s of the check of %s at %s %s: not counted, the half's next round checks it",
            what,
            check.request.transaction_id,
            check.instance.client_id,
            claim_gone(self.service.clock(), check.until),
        )

    async def _undelivered(self, check: PushCheck, outcome: CheckOutcome) -> PushCheck | None:
        """The check reached nobody (refused, reset, DNS, TLS, a connect time-out): not counted;
        the instance is kept aside and the check goes to another one now, if there is one."""
        error = outcome.error
        busy = self._busy(check)
        self.metrics.checks.labels(outcome="undelivered").inc()
        self._round.check(
            "undelivered",
            logging.WARNING,
            "check of %s not delivered to %s (%s); not counted, %s",
            check.request.transaction_id,
            check.instance.client_id,
            error,
            "the instance is busy"
            if busy
            else f"instance set aside for {self.service.checkback.policy.unreachable_ms / 1000:g} s",
        )
        report = await self.service.check_undelivered(check, outcome, set_aside=not busy)
        if report.late:
            self._late(check, "the delivery failure")
        self._observe(report)
        if report.pushes:
            self.metrics.checks.labels(outcome="redirected").inc()
            return report.pushes[0]
        return None


def _trace_context(properties: dict[str, str]) -> dict[str, str]:
    """The half's ``traceparent`` / ``tracestate`` properties, as the headers of its check; a
    value no header may carry (not printable ASCII, longer than W3C allows) is left out, so that a
    producer's odd property never costs the check its delivery."""
    return {
        name: value
        for name in _TRACE_CONTEXT
        if (value := properties.get(name, ""))
        and len(value) <= _TRACE_CONTEXT_MAX
        and value.isascii()
        and value.isprintable()
    }


def _failure(exc: httpx.HTTPError) -> CheckFailure:
    """A check that reached nobody: refused, a connect (or pool) time-out, or another error."""
    cause: BaseException | None = exc
    for _ in range(8):  # httpx -> httpcore -> the socket's own error
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return CheckFailure.REFUSED
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException):
        return CheckFailure.TIMEOUT
    return CheckFailure.ERROR
