"""``TransactionService``: the half-message use cases -- halves, commit and rollback, producer
instances, check-back -- each one unit of work on the store.

The transaction and producer-group routes call these methods; so does the check-back scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker_service.domain import names
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.messages.sending import Sender
from broker_service.domain.ports import RequestNonce, Store, StoreTx, TransactionQuery, nonces
from broker_service.domain.transactions.callbacks import NO_LIMITS, CallbackLimits, CallbackPolicy
from broker_service.domain.transactions.check_audit import check_audit
from broker_service.domain.transactions.checkback import (
    CheckBack,
    CheckRequest,
    PushCheck,
    RoundReport,
)
from broker_service.domain.transactions.halves import (
    HalfReceipt,
    Resolution,
    Resolving,
    Transactions,
    unknown_transaction,
)
from broker_service.domain.transactions.model import (
    CheckAudit,
    CheckOutcome,
    ProducerInstance,
    TransactionRecord,
    TransactionState,
)


class TransactionService:
    def __init__(
        self,
        store: Store,
        sender: Sender,
        checkback: CheckBack,
        callbacks: CallbackPolicy | None = None,
    ) -> None:
        """``sender``: shared with the message service (one round-robin over the queues);
        ``callbacks``: where a heartbeat's callback URL may point (default: its own address)."""
        self.store = store
        self.transactions = Transactions(sender)
        self.checkback = checkback
        self.callbacks = callbacks or CallbackPolicy()

    @property
    def clock(self) -> Callable[[], int]:
        return self.transactions.clock

    # -- halves, commit and rollback -----------------------------------------------------------

    async def prepare(
        self,
        topic: str,
        draft: MessageDraft,
        producer_group: str,
        check_immunity_seconds: float | None,
        client_id: str | None = None,
        *,
        nonce: RequestNonce | None = None,
    ) -> HalfReceipt:
        """``client_id``: the sending instance, when its transport names it (check-back asks it
        first while it is live); ``nonce``: the signed request's
        (:mod:`broker_service.domain.ports.nonces`), as for every write a request makes."""
        half = self.transactions.prepare(
            topic, draft, producer_group, check_immunity_seconds, client_id, nonce=nonce
        )
        return await self.store.write(half)

    async def resolve(
        self, resolving: Resolving, *, nonce: RequestNonce | None = None
    ) -> Resolution:
        """A pull instance's answer is traced as its ``CHECKED`` event when the check-back
        policy traces."""
        trace = self.checkback.policy.trace
        return await self.store.write(
            self.transactions.resolve(resolving, trace=trace, nonce=nonce)
        )

    async def get_transaction(self, transaction_id: str) -> TransactionRecord:
        def unit(tx: StoreTx) -> TransactionRecord:
            record = tx.get_transaction(transaction_id)
            if record is None:
                raise unknown_transaction(tx, transaction_id)
            return record

        return await self.store.read(unit)

    async def checks(self, transaction_id: str) -> CheckAudit:
        """The check audit of one transaction: its checks, oldest first, and why the next round
        will or will not check it (404 ``TRANSACTION_NOT_FOUND`` / ``TRANSACTION_EXPIRED``)."""
        timeout_ms = self.transactions.sender.config.transaction_timeout_ms
        unit = check_audit(transaction_id, self.checkback.policy, timeout_ms, self.clock())
        return await self.store.read(unit)

    async def list_transactions(
        self,
        state: TransactionState | None,
        producer_group: str | None,
        older_than_seconds: float | None,
        limit: int,
    ) -> list[TransactionRecord]:
        created_before = (
            None if older_than_seconds is None else self.clock() - int(older_than_seconds * 1000)
        )
        query = TransactionQuery(state, producer_group, created_before, limit)
        return await self.store.read(lambda tx: tx.list_transactions(query))

    # -- producer instances --------------------------------------------------------------------

    async def heartbeat(
        self,
        group: str,
        client_id: str,
        callback_url: str | None,
        topics: Sequence[str],
        access_key: str | None = None,
        source: str | None = None,
        limits: CallbackLimits | None = None,
        *,
        nonce: RequestNonce | None = None,
    ) -> None:
        """``source``: the address the heartbeat came from, the one a callback URL may name;
        ``limits``: the ports it may not name (the broker's listeners, its store's) or must."""
        if callback_url is not None:
            self.callbacks.check(callback_url, source, limits or NO_LIMITS)
        names.check_name(group, "producer group")
        instance = ProducerInstance(
            group, client_id, callback_url, tuple(topics), self.clock(), access_key=access_key
        )
        await self.store.write(lambda tx: tx.heartbeat(instance), nonce=nonces.take(nonce))

    async def set_aside(self, group: str, client_id: str, error: str) -> None:
        """An instance that can take no check now (a gRPC producer whose Telemetry stream
        closed): the group's other instances are checked for ``unreachable_ms``, as when a push
        check could not reach it."""
        now = self.clock()
        until = now + self.checkback.policy.unreachable_ms
        await self.store.write(
            lambda tx: tx.mark_unreachable(group, client_id, until=until, error=error, now=now)
        )

    async def back_in_reach(self, group: str, client_id: str) -> None:
        """An instance set aside can take checks again (a gRPC producer's stream reopened): the
        next round may choose it at once, without waiting out ``unreachable_ms``."""
        await self.store.write(lambda tx: tx.mark_reachable(group, client_id))

    async def producer_group(self, group: str) -> list[ProducerInstance]:
        names.check_name(group, "producer group")
        return await self.store.read(lambda tx: tx.list_producers(group))

    async def delete_producer_group(self, group: str, *, nonce: RequestNonce | None = None) -> int:
        """Forget a group's instances: its halves wait (skipped, not burned) until one returns."""
        names.check_name(group, "producer group")
        return await self.store.write(
            lambda tx: tx.delete_producer_group(group), nonce=nonces.take(nonce)
        )

    # -- check-back ----------------------------------------------------------------------------

    async def claim_round(self, limit: int) -> RoundReport:
        """The scheduler's round: claim up to ``limit`` due halves and decide for each."""
        return await self.store.write(self.checkback.claim_round(limit))

    async def check_received(self, check: PushCheck, outcome: CheckOutcome) -> bool:
        """A push check reached its instance (see :meth:`CheckBack.delivered`); False when it
        came too late to count: this broker's claim on the half had ended."""
        return await self.store.write(self.checkback.delivered(check, outcome))

    async def check_undelivered(
        self, check: PushCheck, outcome: CheckOutcome, *, set_aside: bool = True
    ) -> RoundReport:
        """A push check reached nobody (see :meth:`CheckBack.undelivered`)."""
        unit = self.checkback.undelivered(check, outcome, set_aside=set_aside)
        return await self.store.write(unit)

    async def pull_checks(
        self, group: str, client_id: str, limit: int, *, nonce: RequestNonce | None = None
    ) -> list[CheckRequest]:
        unit = self.checkback.take_pull_checks(group, client_id, limit)
        return await self.store.write(unit, nonce=nonces.take(nonce))

    async def check_now(
        self, transaction_id: str, actor: str | None = None, *, nonce: RequestNonce | None = None
    ) -> TransactionRecord:
        """An operator's "check again now"; ``actor``: its access key (ACL on)."""
        unit = self.checkback.check_now(transaction_id, actor)
        return await self.store.write(unit, nonce=nonces.take(nonce))

    async def pending_by_age(self, ages_ms: Sequence[int]) -> dict[int, int]:
        now = self.clock()
        return await self.store.read(lambda tx: tx.pending_by_age(now, ages_ms))

    async def undelivered_halves(self, older_than_ms: int) -> int:
        """Open halves whose checks have reached no instance for at least this long."""
        before = self.clock() - older_than_ms
        return await self.store.read(lambda tx: tx.undelivered_halves(before))
