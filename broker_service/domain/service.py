"""``BrokerService``: the broker's use cases, each one unit of work on the store.

The HTTP routes call these methods and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.checkback import CheckBack, CheckRequest
from broker_service.domain.clock import now_ms
from broker_service.domain.config import DomainConfig
from broker_service.domain.errors import NotFound
from broker_service.domain.model import (
    Decision,
    MessageDraft,
    PlainBatch,
    ProducerInstance,
    ResolvedBy,
    StoredMessage,
    TransactionRecord,
    TransactionState,
)
from broker_service.domain.ports import MessageQuery, Store, StoreTx
from broker_service.domain.sending import Sender, SendReceipt
from broker_service.domain.topics import TopicCreated, Topics, TopicView
from broker_service.domain.transactions import HalfReceipt, Resolution, Transactions


@dataclass(frozen=True, slots=True)
class MessageLife:
    """A message and where it is in its life: the copies of it in every topic and its transaction."""

    message: StoredMessage
    copies: list[StoredMessage]
    transaction: TransactionRecord | None
    stage: str


class BrokerService:
    def __init__(
        self, store: Store, config: DomainConfig, clock: Callable[[], int] = now_ms
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.sender = Sender(config, clock=clock)
        self.transactions = Transactions(self.sender)
        self.topics = Topics(config, clock)

    # -- topics ----------------------------------------------------------------------------------

    async def create_topic(self, name: str, queues: int | None, ordered: bool) -> TopicCreated:
        return await self.store.write(self.topics.create(name, queues, ordered))

    async def delete_topic(self, name: str) -> None:
        await self.store.write(self.topics.delete(name))

    async def get_topic(self, name: str) -> TopicView:
        return await self.store.read(self.topics.show(name))

    async def list_topics(self) -> list[TopicView]:
        return await self.store.read(Topics.list_all)

    # -- sending ---------------------------------------------------------------------------------

    async def send(self, topic: str, drafts: Sequence[MessageDraft]) -> list[SendReceipt]:
        return await self.store.write(self.sender.send(topic, drafts))

    async def send_plain(self, topic: str, batch: PlainBatch) -> PlainBatch:
        """A batch of bodies alone: :meth:`send` without a record per message."""
        return await self.store.write(self.sender.send_plain(topic, batch))

    # -- transactions ------------------------------------------------------------------------------

    async def prepare(
        self,
        topic: str,
        draft: MessageDraft,
        producer_group: str,
        check_immunity_seconds: float | None,
    ) -> HalfReceipt:
        unit = self.transactions.prepare(topic, draft, producer_group, check_immunity_seconds)
        return await self.store.write(unit)

    async def resolve(
        self,
        transaction_id: str,
        decision: Decision,
        producer_group: str | None,
        by: ResolvedBy,
        may_end: Callable[[TransactionRecord], None] | None = None,
    ) -> Resolution:
        unit = self.transactions.resolve(transaction_id, decision, producer_group, by, may_end)
        return await self.store.write(unit, read_ahead=(transaction_id,))

    async def get_transaction(self, transaction_id: str) -> TransactionRecord:
        def unit(tx: StoreTx) -> TransactionRecord:
            record = tx.get_transaction(transaction_id)
            if record is None:
                raise NotFound(
                    f"transaction {transaction_id!r} does not exist",
                    code="TRANSACTION_NOT_FOUND",
                    transaction_id=transaction_id,
                )
            return record

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
        return await self.store.read(
            lambda tx: tx.list_transactions(state, producer_group, created_before, limit)
        )

    # -- producers ---------------------------------------------------------------------------------

    async def heartbeat(
        self,
        group: str,
        client_id: str,
        callback_url: str | None,
        topics: Sequence[str],
        access_key: str | None = None,
    ) -> None:
        names.check_name(group, "producer group")
        now = self.clock()
        await self.store.write(
            lambda tx: tx.heartbeat(group, client_id, callback_url, topics, now, access_key)
        )

    # -- check-back ----------------------------------------------------------------------------

    async def pull_checks(
        self, checkback: CheckBack, group: str, client_id: str, limit: int
    ) -> list[CheckRequest]:
        return await self.store.write(checkback.take_pull_checks(group, client_id, limit))

    async def check_now(self, checkback: CheckBack, transaction_id: str) -> TransactionRecord:
        return await self.store.write(checkback.check_now(transaction_id))

    async def producer_group(self, group: str) -> list[ProducerInstance]:
        names.check_name(group, "producer group")
        return await self.store.read(lambda tx: tx.list_producers(group))

    async def delete_producer_group(self, group: str) -> int:
        """Forget a group's instances: its halves wait (skipped, not burned) until one returns."""
        names.check_name(group, "producer group")
        return await self.store.write(lambda tx: tx.delete_producer_group(group))

    async def pending_by_age(self, ages_ms: Sequence[int]) -> dict[int, int]:
        now = self.clock()
        return await self.store.read(lambda tx: tx.pending_by_age(now, ages_ms))

    async def undelivered_halves(self, older_than_ms: int) -> int:
        """Open halves whose checks have reached no instance for at least this long."""
        before = self.clock() - older_than_ms
        return await self.store.read(lambda tx: tx.undelivered_halves(before))

    # -- queries -----------------------------------------------------------------------------------

    async def message_life(self, msg_id: str) -> MessageLife:
        def unit(tx: StoreTx) -> MessageLife:
            copies = tx.find_messages(msg_id)
            if not copies:
                raise NotFound(
                    f"message {msg_id!r} does not exist", code="MESSAGE_NOT_FOUND", msg_id=msg_id
                )
            transaction = None
            txid = next((m.transaction_id for m in copies if m.transaction_id), None)
            if txid is not None:
                transaction = tx.get_transaction(txid)
            return _life(copies, transaction)

        return await self.store.read(unit)

    async def query_messages(self, query: MessageQuery) -> list[StoredMessage]:
        return await self.store.read(lambda tx: tx.query_messages(query))


def _life(copies: list[StoredMessage], transaction: TransactionRecord | None) -> MessageLife:
    user = [m for m in copies if not names.is_system_topic(m.topic)]
    scheduled = [m for m in copies if m.topic == names.SCHEDULE_TOPIC and m.released_at is None]
    if user:
        stage, message = "STORED", user[0]
    elif scheduled:
        stage, message = "SCHEDULED", scheduled[0]
    elif transaction is not None:
        stage = {
            TransactionState.PREPARED: "HALF",
            TransactionState.DISCARDED: "DISCARDED",
            TransactionState.ROLLED_BACK: "ROLLED_BACK",
            TransactionState.COMMITTED: "COMMITTED",
        }[transaction.state]
        message = next(m for m in copies if m.topic == names.HALF_TOPIC)
    else:
        stage, message = "STORED", copies[0]
    return MessageLife(message, copies, transaction, stage)
