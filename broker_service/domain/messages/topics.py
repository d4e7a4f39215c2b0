"""Topic administration: create (idempotent for the same config), list, show, delete."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.config import DomainConfig
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound
from broker_service.domain.messages.model import QueueInfo, Topic
from broker_service.domain.ports import MessageStore, StoreTx


@dataclass(frozen=True, slots=True)
class TopicView:
    topic: Topic
    queues: list[QueueInfo]


@dataclass(frozen=True, slots=True)
class TopicCreated:
    view: TopicView
    created: bool


class Topics:
    def __init__(self, config: DomainConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock

    def create(
        self, name: str, queues: int | None, ordered: bool
    ) -> Callable[[StoreTx], TopicCreated]:
        names.check_user_topic(name)
        count = self.config.default_topic_queues if queues is None else queues
        if not 1 <= count <= self.config.max_topic_queues:
            raise InvalidRequest(
                f"queues must be 1-{self.config.max_topic_queues}", code="INVALID_QUEUE_COUNT"
            )

        def unit(tx: MessageStore) -> TopicCreated:
            existing = tx.get_topic(name)
            if existing is not None:
                if existing.queues != count or existing.ordered != ordered:
                    raise Conflict(
                        f"topic {name!r} exists with queues={existing.queues}, "
                        f"order={str(existing.ordered).lower()}",
                        code="TOPIC_EXISTS",
                        topic=name,
                        queues=existing.queues,
                        order=existing.ordered,
                    )
                return TopicCreated(_view(tx, existing), created=False)
            topic = Topic(name, count, ordered, 6, False, self.clock())
            tx.create_topic(topic)
            return TopicCreated(_view(tx, topic), created=True)

        return unit

    @staticmethod
    def delete(name: str) -> Callable[[StoreTx], None]:
        names.check_user_topic(name)

        def unit(tx: MessageStore) -> None:
            if tx.get_topic(name) is None:
                raise _not_found(name)
            tx.delete_topic(name)

        return unit

    @staticmethod
    def show(name: str) -> Callable[[StoreTx], TopicView]:
        names.check_name(name, "topic")

        def unit(tx: MessageStore) -> TopicView:
            topic = tx.get_topic(name)
            if topic is None:
                raise _not_found(name)
            return _view(tx, topic)

        return unit

    @staticmethod
    def list_all(tx: MessageStore) -> list[TopicView]:
        return [_view(tx, topic) for topic in tx.list_topics()]


def _not_found(name: str) -> NotFound:
    return NotFound(f"topic {name!r} does not exist", code="TOPIC_NOT_FOUND", topic=name)


def _view(tx: MessageStore, topic: Topic) -> TopicView:
    infos = {q.queue_id: q for q in tx.queue_infos(topic.name)}
    queues = [infos.get(i, QueueInfo(topic.name, i, 0, 0)) for i in range(topic.queues)]
    return TopicView(topic, queues)
