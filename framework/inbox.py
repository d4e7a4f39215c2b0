"""Idempotent and transacted consumers on SQLAlchemy: the handler's writes, the inbox row
``(consumer group, dedup key)`` and nothing else share one transaction; the ack follows the commit.

The inbox row is inserted *first*: a second delivery of the same message (a stale handle, a
crashed member, a nack after a commit) collides with it -- on PostgreSQL it waits for the first
delivery's transaction and collides once that commits -- and is acked without running the
handler again.  One effect per message.  :func:`consume_step` hands it to the consumer's flow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from framework.acks import succeeded
from framework.flow import Invoke
from framework.message import Message
from framework.tables import inbox
from framework.txlog import is_async_factory

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True, slots=True)
class Consumed:
    ok: bool
    duplicate: bool = False
    error: BaseException | None = None


def _row(group: str, key: str, message: Message) -> dict[str, Any]:
    return {
        "consumer_group": group,
        "dedup_key": key,
        "msg_id": message.msg_id,
        "topic": message.topic,
        "created_at": int(time.time() * 1000),
    }


def consume(
    session_factory: Callable[[], Session],
    fn: Callable[[Session, Message], Any],
    message: Message,
    group: str,
    dedup_key: str | None,
) -> Consumed:
    with session_factory() as session:
        session.begin()
        if dedup_key is not None:
            try:
                session.execute(insert(inbox).values(_row(group, dedup_key, message)))
            except IntegrityError:
                session.rollback()
                return Consumed(True, duplicate=True)
        try:
            ok = succeeded(fn(session, message))
        except Exception as exc:
            session.rollback()
            return Consumed(False, error=exc)
        if not ok:
            session.rollback()
            return Consumed(False)
        try:
            session.commit()
        except Exception as exc:
            return Consumed(False, error=exc)
    return Consumed(True)


async def consume_async(
    session_factory: Callable[[], AsyncSession],
    fn: Callable[[AsyncSession, Message], Any],
    message: Message,
    group: str,
    dedup_key: str | None,
) -> Consumed:
    async with session_factory() as session:
        await session.begin()
        if dedup_key is not None:
            try:
                await session.execute(insert(inbox).values(_row(group, dedup_key, message)))
            except IntegrityError:
                await session.rollback()
                return Consumed(True, duplicate=True)
        try:
            ok = succeeded(await fn(session, message))
        except Exception as exc:
            await session.rollback()
            return Consumed(False, error=exc)
        if not ok:
            await session.rollback()
            return Consumed(False)
        try:
            await session.commit()
        except Exception as exc:
            return Consumed(False, error=exc)
    return Consumed(True)


def consume_step(
    session_factory: Any,
    fn: Callable[..., Any],
    message: Message,
    group: str,
    dedup_key: str | None,
) -> Invoke:
    """:func:`consume` (or :func:`consume_async`) as a step; answers :class:`Consumed`."""
    aio = consume_async if is_async_factory(session_factory) else None
    return Invoke(consume, (session_factory, fn, message, group, dedup_key), aio)
