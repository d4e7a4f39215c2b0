"""Idempotent and transacted consumers on SQLAlchemy: the handler's writes, the inbox row
``(consumer group, dedup key)`` and nothing else share one transaction; the ack follows the commit.

The inbox row is inserted *first*: a second delivery of the same message (a stale handle, a
crashed member, a nack after a commit) collides with it -- on PostgreSQL it waits for the first
delivery's transaction and collides once that commits -- and is acked without running the
handler again.  One effect per message.  :func:`consume_step` hands it to the consumer's flow.

A batch (:func:`consume_batch`, :func:`consume_batch_step`) is one transaction too: one
``INSERT ... ON CONFLICT DO NOTHING RETURNING`` claims the keys of all its messages (SQLite and
PostgreSQL; on PostgreSQL it waits for a concurrent delivery's transaction like the single insert),
the handler gets only the messages whose key was not there yet, and the others are duplicates,
acked without running it.  When the handler answers the index of the first failed message, the
inbox rows of that message and those after it are deleted before the commit, so they are handled
again when they come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Delete, Insert, delete, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from framework.acks import FAILED, BatchVerdict, batch_verdict, succeeded
from framework.errors import ConfigurationError
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


# -- batches ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchConsumed:
    """A batch in one transaction: the ``duplicates`` (their keys were in the inbox: acked
    without the handler), the ``fresh`` messages the handler got, and its verdict on them."""

    duplicates: tuple[Message, ...]
    fresh: tuple[Message, ...]
    verdict: BatchVerdict
    error: BaseException | None = None


def _claim_statement(dialect: str, group: str, keyed: dict[str, Message]) -> Insert:
    """Insert every key not in the inbox yet, answering the keys it inserted."""
    rows = [_row(group, key, message) for key, message in keyed.items()]
    if dialect == "postgresql":
        pg = postgresql.insert(inbox).values(rows).on_conflict_do_nothing()
        return pg.returning(inbox.c.dedup_key)
    if dialect == "sqlite":
        lite = sqlite.insert(inbox).values(rows).on_conflict_do_nothing()
        return lite.returning(inbox.c.dedup_key)
    raise ConfigurationError(
        f"an idempotent batch handler needs SQLite or PostgreSQL (this database is {dialect})"
    )


def _unclaim_statement(group: str, keys: list[str]) -> Delete:
    return delete(inbox).where(inbox.c.consumer_group == group, inbox.c.dedup_key.in_(keys))


def _first_per_key(
    messages: Sequence[Message], keys: Sequence[str]
) -> tuple[dict[str, Message], list[Message]]:
    """The first message of each key, and the later ones (duplicates inside the batch)."""
    keyed: dict[str, Message] = {}
    repeats: list[Message] = []
    for message, key in zip(messages, keys, strict=True):
        if key in keyed:
            repeats.append(message)
        else:
            keyed[key] = message
    return keyed, repeats


def _split(
    keyed: dict[str, Message], repeats: list[Message], claimed: set[str]
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """(duplicates, fresh): the messages whose key was claimed now are fresh."""
    fresh = tuple(m for k, m in keyed.items() if k in claimed)
    duplicates = tuple(m for k, m in keyed.items() if k not in claimed) + tuple(repeats)
    return duplicates, fresh


def _unfinished_keys(
    keyed: dict[str, Message], fresh: tuple[Message, ...], verdict: BatchVerdict
) -> list[str]:
    """The inbox keys of the fresh messages the verdict leaves unfinished."""
    left = {m.msg_id for m in fresh[verdict.done :]}
    return [k for k, m in keyed.items() if m.msg_id in left]


def consume_batch(
    session_factory: Callable[[], Session],
    fn: Callable[[Session, list[Message]], Any],
    messages: Sequence[Message],
    group: str,
    keys: Sequence[str] | None,
) -> BatchConsumed:
    """``fn(session, fresh)`` and the inbox rows of ``messages`` (by ``keys``; None: no inbox)
    in one transaction."""
    with session_factory() as session:
        session.begin()
        duplicates: tuple[Message, ...] = ()
        fresh, keyed = tuple(messages), {m.msg_id: m for m in messages}
        if keys is not None:
            keyed, repeats = _first_per_key(messages, keys)
            statement = _claim_statement(session.get_bind().dialect.name, group, keyed)
            claimed = set(session.execute(statement).scalars())
            duplicates, fresh = _split(keyed, repeats, claimed)
        if not fresh:
            session.rollback()
            return BatchConsumed(duplicates, fresh, BatchVerdict(0))
        try:
            verdict = batch_verdict(fn(session, list(fresh)), len(fresh))
        except Exception as exc:
            session.rollback()
            return BatchConsumed(duplicates, fresh, FAILED, exc)
        if verdict.done == 0:
            session.rollback()
            return BatchConsumed(duplicates, fresh, verdict)
        if keys is not None and verdict.done < len(fresh):
            session.execute(_unclaim_statement(group, _unfinished_keys(keyed, fresh, verdict)))
        try:
            session.commit()
        except Exception as exc:
            return BatchConsumed(duplicates, fresh, FAILED, exc)
    return BatchConsumed(duplicates, fresh, verdict)


async def consume_batch_async(
    session_factory: Callable[[], AsyncSession],
    fn: Callable[[AsyncSession, list[Message]], Any],
    messages: Sequence[Message],
    group: str,
    keys: Sequence[str] | None,
) -> BatchConsumed:
    """:func:`consume_batch` on an ``AsyncSession``."""
    async with session_factory() as session:
        await session.begin()
        duplicates: tuple[Message, ...] = ()
        fresh, keyed = tuple(messages), {m.msg_id: m for m in messages}
        if keys is not None:
            keyed, repeats = _first_per_key(messages, keys)
            statement = _claim_statement(session.get_bind().dialect.name, group, keyed)
            claimed = set((await session.execute(statement)).scalars())
            duplicates, fresh = _split(keyed, repeats, claimed)
        if not fresh:
            await session.rollback()
            return BatchConsumed(duplicates, fresh, BatchVerdict(0))
        try:
            verdict = batch_verdict(await fn(session, list(fresh)), len(fresh))
        except Exception as exc:
            await session.rollback()
            return BatchConsumed(duplicates, fresh, FAILED, exc)
        if verdict.done == 0:
            await session.rollback()
            return BatchConsumed(duplicates, fresh, verdict)
        if keys is not None and verdict.done < len(fresh):
            await session.execute(
                _unclaim_statement(group, _unfinished_keys(keyed, fresh, verdict))
            )
        try:
            await session.commit()
        except Exception as exc:
            return BatchConsumed(duplicates, fresh, FAILED, exc)
    return BatchConsumed(duplicates, fresh, verdict)


def consume_batch_step(
    session_factory: Any,
    fn: Callable[..., Any],
    messages: Sequence[Message],
    group: str,
    keys: Sequence[str] | None,
) -> Invoke:
    """:func:`consume_batch` (or :func:`consume_batch_async`) as a step; answers
    :class:`BatchConsumed`."""
    aio = consume_batch_async if is_async_factory(session_factory) else None
    return Invoke(consume_batch, (session_factory, fn, messages, group, keys), aio)
