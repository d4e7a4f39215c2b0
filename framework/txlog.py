"""Automatic check mode on SQLAlchemy: the local-transaction log.

The local transaction inserts its log row (``COMMIT``) *first*, then runs the handler, then
commits -- one transaction in the user's database.  A check inserts the same key with a
``ROLLBACK`` marker in its own transaction:

* while the local transaction is open, the check's insert waits for it (PostgreSQL: the pending
  unique key; SQLite: the database write lock, under ``busy_timeout``);
* the local transaction committed -> the check's insert collides -> it reads ``COMMIT``;
* it rolled back, crashed, or never started -> the insert succeeds -> ``ROLLBACK``; and a local
  transaction that starts later (a zombie) collides with the marker and rolls back;
* anything else (a lock wait that timed out, a lost connection) -> ``UNKNOW``: asked again later.

So a check never answers ROLLBACK for a transaction that then commits.

:func:`local_step` and :func:`check_step` hand both to a decision flow (:mod:`framework.flow`):
the sync face runs the sync version; the asyncio face awaits the async one for an
``async_sessionmaker`` and runs the sync one in a worker thread for a plain ``sessionmaker``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from framework.flow import Invoke
from framework.message import LocalTransactionState, Message
from framework.tables import local_transaction_log as log_table

if TYPE_CHECKING:  # SQLAlchemy's asyncio needs greenlet: imported only where it is used
    from sqlalchemy.ext.asyncio import AsyncSession

COMMIT, ROLLBACK = "COMMIT", "ROLLBACK"
State = LocalTransactionState

SyncBody = Callable[[Session, Message, Any], Any]
AsyncBody = Callable[["AsyncSession", Message, Any], Awaitable[Any]]


class _RolledBack(Exception):
    pass


# One statement, its row given as parameters: built once rather than a ``.values()`` per call.
_INSERT = insert(log_table)


def _row(message: Message, group: str, state: str) -> dict[str, Any]:
    return {
        "transaction_id": message.transaction_id,
        "producer_group": group,
        "topic": message.topic,
        "msg_id": message.msg_id,
        "state": state,
        "created_at": int(time.time() * 1000),
    }


def _answer(stored: str | None) -> State:
    return {COMMIT: State.COMMIT_MESSAGE, ROLLBACK: State.ROLLBACK_MESSAGE}.get(
        stored or "", State.UNKNOW
    )


def run_local(
    session_factory: Callable[[], Session], body: SyncBody, message: Message, arg: Any, group: str
) -> tuple[State, BaseException | None]:
    """Run ``body`` in one transaction with the log row; the state and the body's exception."""
    with session_factory() as session:
        session.begin()
        try:
            session.execute(_INSERT, _row(message, group, COMMIT))
        except IntegrityError as exc:  # a check decided ROLLBACK first
            session.rollback()
            return State.ROLLBACK_MESSAGE, exc
        try:
            if body(session, message, arg) is State.ROLLBACK_MESSAGE:
                raise _RolledBack
        except _RolledBack:
            session.rollback()
            return State.ROLLBACK_MESSAGE, None
        except Exception as exc:
            session.rollback()
            return State.ROLLBACK_MESSAGE, exc
        try:
            session.commit()
        except Exception as exc:  # committed or not: the check will find out from the log
            return State.UNKNOW, exc
    return State.COMMIT_MESSAGE, None


def check(session_factory: Callable[[], Session], message: Message, group: str) -> State:
    """Answer a check from the log (blocks while the local transaction is still open)."""
    with session_factory() as session:
        try:
            with session.begin():
                session.execute(_INSERT, _row(message, group, ROLLBACK))
            return State.ROLLBACK_MESSAGE
        except IntegrityError:
            pass
        with session.begin():
            query = select(log_table.c.state).where(
                log_table.c.transaction_id == message.transaction_id
            )
            return _answer(session.execute(query).scalar_one_or_none())


async def run_local_async(
    session_factory: Callable[[], AsyncSession],
    body: AsyncBody,
    message: Message,
    arg: Any,
    group: str,
) -> tuple[State, BaseException | None]:
    async with session_factory() as session:
        await session.begin()
        try:
            await session.execute(_INSERT, _row(message, group, COMMIT))
        except IntegrityError as exc:
            await session.rollback()
            return State.ROLLBACK_MESSAGE, exc
        try:
            if await body(session, message, arg) is State.ROLLBACK_MESSAGE:
                raise _RolledBack
        except _RolledBack:
            await session.rollback()
            return State.ROLLBACK_MESSAGE, None
        except Exception as exc:
            await session.rollback()
            return State.ROLLBACK_MESSAGE, exc
        try:
            await session.commit()
        except Exception as exc:
            return State.UNKNOW, exc
    return State.COMMIT_MESSAGE, None


async def check_async(
    session_factory: Callable[[], AsyncSession], message: Message, group: str
) -> State:
    async with session_factory() as session:
        try:
            async with session.begin():
                await session.execute(_INSERT, _row(message, group, ROLLBACK))
            return State.ROLLBACK_MESSAGE
        except IntegrityError:
            pass
        async with session.begin():
            query = select(log_table.c.state).where(
                log_table.c.transaction_id == message.transaction_id
            )
            return _answer((await session.execute(query)).scalar_one_or_none())


def is_async_factory(factory: object) -> bool:
    """An ``async_sessionmaker`` (needs SQLAlchemy's asyncio extra, i.e. greenlet)."""
    try:
        from sqlalchemy.ext.asyncio import async_sessionmaker
    except ImportError:
        return False
    return isinstance(factory, async_sessionmaker)


def local_step(
    session_factory: Any, body: Callable[..., Any], message: Message, arg: Any, group: str
) -> Invoke:
    """:func:`run_local` (or :func:`run_local_async`) as a step; answers ``(state, error)``."""
    aio = run_local_async if is_async_factory(session_factory) else None
    return Invoke(run_local, (session_factory, body, message, arg, group), aio)


def check_step(session_factory: Any, message: Message, group: str) -> Invoke:
    """:func:`check` (or :func:`check_async`) as a step; answers the state."""
    aio = check_async if is_async_factory(session_factory) else None
    return Invoke(check, (session_factory, message, group), aio)
