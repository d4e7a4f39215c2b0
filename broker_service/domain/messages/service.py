"""``MessageService``: the message and topic use cases, each one unit of work on the store.

The topic, sending and message routes call these methods; the delay scheduler calls
:meth:`MessageService.release_due`.  A method that writes takes the signed request's ``nonce``
(:mod:`broker_service.domain.ports.nonces`) and hands it to its write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker_service.domain.messages.delays import DelayReleaser, ReleaseReport
from broker_service.domain.messages.life import MessageLife, message_life
from broker_service.domain.messages.model import (
    MayRead,
    MessageDraft,
    PlainBatch,
    StoredMessage,
    readable,
)
from broker_service.domain.messages.sending import Sender, SendReceipt
from broker_service.domain.messages.topics import TopicCreated, Topics, TopicView
from broker_service.domain.ports import MessageQuery, RequestNonce, Store, nonces


class MessageService:
    def __init__(self, store: Store, sender: Sender) -> None:
        """``sender``: shared with the transactions' halves (one round-robin over the queues)."""
        self.store = store
        self.sender = sender
        self.topics = Topics(sender.config, sender.clock)
        self.releaser = DelayReleaser(sender.clock)

    @property
    def clock(self) -> Callable[[], int]:
        return self.sender.clock

    # -- topics ----------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None, ordered: bool, *, nonce: RequestNonce | None = None
    ) -> TopicCreated:
        return await self.store.write(
            self.topics.create(name, queues, ordered), nonce=nonces.take(nonce)
        )

    async def delete_topic(self, name: str, *, nonce: RequestNonce | None = None) -> None:
        await self.store.write(self.topics.delete(name), nonce=nonces.take(nonce))

    async def get_topic(self, name: str) -> TopicView:
        return await self.store.read(self.topics.show(name))

    async def list_topics(self) -> list[TopicView]:
        return await self.store.read(Topics.list_all)

    # -- sending ---------------------------------------------------------------------------------

    async def send(
        self, topic: str, drafts: Sequence[MessageDraft], *, nonce: RequestNonce | None = None
    ) -> list[SendReceipt]:
        return await self.store.write(self.sender.send(topic, drafts, nonce=nonce))

    async def send_plain(
        self, topic: str, batch: PlainBatch, *, nonce: RequestNonce | None = None
    ) -> PlainBatch:
        """A batch of bodies alone: :meth:`send` without a record per message."""
        return await self.store.write(self.sender.send_plain(topic, batch, nonce=nonce))

    async def release_due(self, limit: int) -> ReleaseReport:
        """Move up to ``limit`` delayed messages whose time has come into their real topics."""
        return await self.store.write(self.releaser.release_due(limit))

    # -- queries ---------------------------------------------------------------------------------

    async def message_life(self, msg_id: str) -> MessageLife:
        return await self.store.read(message_life(msg_id))

    async def query_messages(
        self, query: MessageQuery, may_read: MayRead | None = None
    ) -> list[StoredMessage]:
        """The messages found, each only if ``may_read`` its topic (:func:`readable`): a page
        may then hold fewer than ``query.limit``."""
        found = await self.store.read(lambda tx: tx.query_messages(query))
        return readable(found, may_read)
