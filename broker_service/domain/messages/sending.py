"""Sending: normal, ordered, delayed and batch messages, with retransmit dedup by ``msg_id``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from broker_service.domain import names
from broker_service.domain.clock import now_ms
from broker_service.domain.config import DomainConfig
from broker_service.domain.errors import Conflict, InvalidRequest, MessageTooLarge, NotFound
from broker_service.domain.ids import new_id
from broker_service.domain.messages.model import (
    NO_PROPERTIES,
    PROP_DELIVER_AT,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    RESERVED_PROPERTIES,
    Encoding,
    MessageDraft,
    PendingMessage,
    PlainBatch,
    StoredMessage,
    Topic,
)
from broker_service.domain.messages.queues import QueueSelector
from broker_service.domain.ports import MessageStore, RequestNonce, Send, StoreTx, nonces

Message = StoredMessage | PendingMessage

_ENCODING_VALUES = {encoding: encoding.value for encoding in Encoding}  # cheaper than .value


class SendReceipt(NamedTuple):
    """RocketMQ's SendResult.  A delayed message has no offset in its real topic until released."""

    msg_id: str
    topic: str
    queue_id: int
    message: Message
    duplicate: bool
    deliver_at: int | None = None

    @property
    def queue_offset(self) -> int | None:
        if self.message.topic == names.SCHEDULE_TOPIC:
            return None
        return self.message.queue_offset


def receipt_for(message: Message, *, duplicate: bool) -> SendReceipt:
    """The answer for a stored message; a delayed one is answered with its real topic and queue."""
    if message.topic == names.SCHEDULE_TOPIC:
        return SendReceipt(
            msg_id=message.msg_id,
            topic=message.properties[PROP_REAL_TOPIC],
            queue_id=int(message.properties[PROP_REAL_QUEUE_ID]),
            message=message,
            duplicate=duplicate,
            deliver_at=message.deliver_at,
        )
    return SendReceipt(message.msg_id, message.topic, message.queue_id, message, duplicate)


def _pending(topic: str, queue_id: int, draft: MessageDraft, now: int) -> PendingMessage:
    """The message a draft becomes (positionally: a batch makes up to 1,000 per request)."""
    return PendingMessage(
        topic,
        queue_id,
        draft.msg_id or new_id(),
        draft.body,
        _ENCODING_VALUES[draft.encoding],
        draft.born_at or now,
        now,
        draft.tags,
        draft.keys,
        dict(draft.properties) if draft.properties else NO_PROPERTIES,
        draft.sharding_key,
    )


class Sender:
    """Builds the units of work of sending; shared by plain sends and halves."""

    def __init__(
        self,
        config: DomainConfig,
        selector: QueueSelector | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.selector = selector or QueueSelector()
        self.clock = clock

    # -- checks, before any change ------------------------------------------------------------

    def check_draft(self, draft: MessageDraft) -> None:
        if draft.tags is not None:
            names.check_tag(draft.tags)
        if draft.keys:
            names.check_keys(draft.keys)
        size = len(draft.body)
        if draft.properties:
            size += sum(len(k) + len(v) for k, v in draft.properties.items())
            reserved = RESERVED_PROPERTIES.intersection(draft.properties)
            if reserved:
                raise InvalidRequest(
                    f"properties {sorted(reserved)} are reserved for the broker",
                    code="RESERVED_PROPERTY",
                )
        self.check_size(size)
        if draft.delay_level is not None:
            levels = len(self.config.delay_levels_ms)
            if not 0 <= draft.delay_level <= levels:
                raise InvalidRequest(
                    f"delay_level must be 1-{levels} (0 or null: no delay)",
                    code="INVALID_DELAY_LEVEL",
                )
        if draft.deliver_at is not None:
            self.check_deliver_at(draft.deliver_at)

    def check_deliver_at(self, deliver_at: int) -> None:
        """A timer message is at most ``max_delay_ms`` away (RocketMQ 5's timerMaxDelaySec): a
        time in the year 9999 would park a message, and its row, for ever."""
        latest = self.clock() + self.config.max_delay_ms
        if deliver_at > latest:
            raise InvalidRequest(
                f"deliver_at is more than {self.config.max_delay_ms / 1000:g} s ahead "
                "(max_delay_seconds)",
                code="DELIVER_AT_TOO_FAR",
                deliver_at_ms=deliver_at,
                latest_ms=latest,
                max_delay_seconds=self.config.max_delay_ms / 1000,
            )

    def check_size(self, size: int) -> None:
        if size > self.config.max_message_bytes:
            raise MessageTooLarge(
                f"message of {size} bytes is over max_message_bytes "
                f"({self.config.max_message_bytes})",
                size=size,
                limit=self.config.max_message_bytes,
            )

    def topic_for_send(self, tx: MessageStore, name: str) -> Topic:
        names.check_user_topic(name)
        topic = tx.get_topic(name)
        if topic is not None:
            return topic
        if not self.config.auto_create_topics:
            raise NotFound(
                f"topic {name!r} does not exist (create it first; auto_create_topics is off)",
                code="TOPIC_NOT_FOUND",
                topic=name,
            )
        topic = Topic(name, self.config.default_topic_queues, False, 6, False, self.clock())
        tx.create_topic(topic)
        return topic

    def previous_send(
        self, tx: MessageStore, draft: MessageDraft, content_hash: str | None
    ) -> Message | None:
        """The message a retransmit repeats, or None; another message under its id is a 409."""
        if draft.msg_id is None:
            return None
        found = tx.find_sent([draft.msg_id]).get(draft.msg_id)
        if found is None:
            return None
        if found.content_hash != content_hash:
            raise Conflict(
                f"msg_id {draft.msg_id!r} was already used for a different message",
                code="MESSAGE_ID_CONFLICT",
                msg_id=draft.msg_id,
            )
        return found

    # -- building what to append --------------------------------------------------------------

    def delay_ms(self, draft: MessageDraft, now: int) -> int | None:
        """When a delayed message becomes deliverable, or None if it is deliverable now."""
        if draft.delay_level:
            return now + self.config.delay_levels_ms[draft.delay_level - 1]
        if draft.deliver_at is not None and draft.deliver_at > now:
            return draft.deliver_at
        return None

    def placed(
        self,
        message: PendingMessage,
        deliver_at: int | None,
        delay_level: int | None,
    ) -> PendingMessage:
        """Park a message that is not yet deliverable in SCHEDULE_TOPIC_XXXX, as RocketMQ does:
        one queue per delay level, the last one for an explicit ``deliver_at``."""
        if deliver_at is None:
            return message
        properties = dict(message.properties)
        properties[PROP_REAL_TOPIC] = message.topic
        properties[PROP_REAL_QUEUE_ID] = str(message.queue_id)
        properties[PROP_DELIVER_AT] = str(deliver_at)
        message.properties = properties
        message.queue_id = (delay_level or len(self.config.delay_levels_ms) + 1) - 1
        message.topic = names.SCHEDULE_TOPIC
        message.deliver_at = deliver_at
        return message

    def new_message(
        self,
        topic: Topic,
        draft: MessageDraft,
        content_hash: str | None,
        now: int,
        next_queue: int | None = None,
    ) -> PendingMessage:
        """``next_queue``: the send's round-robin pick, for a draft that names no queue."""
        message = _pending(topic.name, self.selector.select(topic, draft, next_queue), draft, now)
        message.content_hash = content_hash
        if draft.msg_id is not None:
            message.dedup_key = draft.msg_id  # a client-made id can come again: dedup it
        return message

    # -- units of work -------------------------------------------------------------------------

    def send(
        self,
        topic_name: str,
        drafts: Sequence[MessageDraft],
        *,
        nonce: RequestNonce | None = None,
    ) -> Send[list[SendReceipt]]:
        """All the drafts are stored, in order, or none is.  The command names the drafts'
        client-made ids, whose earlier sends it looks for, so that a store may look for those of
        a whole group commit at once; ``nonce``: the signed request's, taken
        (:func:`~broker_service.domain.ports.nonces.take`) once its checks have passed."""

        names.check_user_topic(topic_name)
        for draft in drafts:
            self.check_draft(draft)
        if not any(draft.msg_id for draft in drafts):
            return Send(self._send_new(topic_name, drafts), topic_name, nonce=nonces.take(nonce))

        def unit(tx: MessageStore) -> list[SendReceipt]:
            topic = self.topic_for_send(tx, topic_name)
            now = self.clock()
            next_queue = self.selector.next_queue(topic)
            receipts: list[SendReceipt | None] = []
            fresh: list[tuple[int, PendingMessage]] = []
            in_request: dict[str, str | None] = {}
            for draft in drafts:
                # Only a client-made msg_id can come again: the hash is what a retransmit matches.
                content_hash = draft.content_hash(topic.name) if draft.msg_id else None
                seen = in_request.get(draft.msg_id) if draft.msg_id else None
                if seen is not None and seen != content_hash:
                    raise Conflict(
                        f"msg_id {draft.msg_id!r} appears twice with different content",
                        code="MESSAGE_ID_CONFLICT",
                        msg_id=draft.msg_id,
                    )
                previous = self.previous_send(tx, draft, content_hash)
                if previous is not None:
                    receipts.append(receipt_for(previous, duplicate=True))
                    continue
                message = self.new_message(topic, draft, content_hash, now, next_queue)
                in_request[message.msg_id] = content_hash
                deliver_at = self.delay_ms(draft, now)
                fresh.append((len(receipts), self.placed(message, deliver_at, draft.delay_level)))
                receipts.append(None)
            first_of: dict[str, PendingMessage] = {}
            for index, message in fresh:
                first = first_of.setdefault(message.msg_id, message)
                if first is message:
                    tx.append(message)
                receipts[index] = receipt_for(first, duplicate=first is not message)
            return [r for r in receipts if r is not None]

        msg_ids = tuple(dict.fromkeys(d.msg_id for d in drafts if d.msg_id))
        return Send(unit, topic_name, msg_ids, nonce=nonces.take(nonce))

    def _send_new(
        self, topic_name: str, drafts: Sequence[MessageDraft]
    ) -> Callable[[StoreTx], list[SendReceipt]]:
        """Drafts without a client-made msg_id: none can repeat an earlier send, so none is looked
        up.  The common batch, and the broker's hottest loop: the messages are made here, on the
        caller's side of the group-commit writer, and the unit only places them in a queue."""
        born = self.clock()
        # The queue is chosen in the unit, where the topic is read.
        messages = [_pending(topic_name, -1, draft, born) for draft in drafts]
        # Drafts that name a queue, a sharding key or a delay go through the selector and the
        # schedule topic; a delayed message is made again in the unit (placing one changes it).
        special = [
            index
            for index, draft in enumerate(drafts)
            if draft.queue_id is not None
            or draft.sharding_key is not None
            or draft.delay_level
            or draft.deliver_at is not None
        ]

        def unit(tx: MessageStore) -> list[SendReceipt]:
            topic = self.topic_for_send(tx, topic_name)
            now = self.clock()
            next_queue = self.selector.next_queue(topic)
            placed = list(messages)
            for message in placed:
                message.queue_id = next_queue
                message.stored_at = now
            for index in special:
                draft = drafts[index]
                deliver_at = self.delay_ms(draft, now)
                if deliver_at is None:
                    placed[index].queue_id = self.selector.select(topic, draft, next_queue)
                else:
                    message = self.new_message(topic, draft, None, now, next_queue)
                    placed[index] = self.placed(message, deliver_at, draft.delay_level)
            tx.append_all(placed)
            return [receipt_for(message, duplicate=False) for message in placed]

        return unit

    def send_plain(
        self, topic_name: str, batch: PlainBatch, *, nonce: RequestNonce | None = None
    ) -> Send[PlainBatch]:
        """A batch of bodies alone (see :class:`PlainBatch`), all stored, in order, or none.  Its
        ids are made here, on the caller's side of the group-commit writer; the unit only picks
        the queue (the send's round-robin pick, as for ``_send_new``) and stamps the store time."""
        names.check_user_topic(topic_name)
        self.check_size(max(map(len, batch.bodies), default=0))
        batch.topic = topic_name
        batch.born_at = self.clock()
        batch.msg_ids = [new_id() for _ in batch.bodies]

        def unit(tx: MessageStore) -> PlainBatch:
            topic = self.topic_for_send(tx, topic_name)
            batch.queue_id = self.selector.next_queue(topic)
            batch.stored_at = self.clock()
            tx.append_batch(batch)
            return batch

        return Send(unit, topic_name, nonce=nonces.take(nonce))
