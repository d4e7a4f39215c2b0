"""FastAPI integration: start and stop clients with the app, hand the producer to routes, and mount
the push check-back route.

::

    producer = AsyncTransactionProducer("bob-bank", brokers=[...], check=CheckMode.push(
        "http://bob-bank.internal:8000/halfmq/check"))
    app = FastAPI(lifespan=halfmq_lifespan(producer))
    app.include_router(check_router(producer))
    ProducerDep = Annotated[AsyncTransactionProducer, Depends(producer_dependency(producer))]

    @app.post("/transfers")
    async def transfer(producer: ProducerDep): ...
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from framework.aio_producer import AsyncTransactionProducer
from framework.checkserver import CHECK_PATH, parse_check, refusal, refusal_body
from framework.message import LocalTransactionState, Message
from framework.producer import TransactionProducer
from framework.signing import check_verifier

C = TypeVar("C")
AnyProducer = TransactionProducer | AsyncTransactionProducer


async def _stop(client: Any) -> None:
    if inspect.iscoroutinefunction(client.shutdown):
        await client.shutdown()
    else:
        await asyncio.to_thread(client.shutdown)


def halfmq_lifespan(
    *clients: Any,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan that starts the producers and consumers with the app and stops them (in reverse
    order) when it stops.  Sync clients start and stop in a worker thread."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started: list[Any] = []
        try:
            for client in clients:
                if inspect.iscoroutinefunction(client.start):
                    await client.start()
                else:
                    await asyncio.to_thread(client.start)
                started.append(client)
            app.state.halfmq_clients = clients
            yield
        finally:
            for client in reversed(started):
                await _stop(client)

    return lifespan


def producer_dependency(producer: C) -> Callable[[], C]:
    """A dependency that hands ``producer`` to routes:
    ``ProducerDep = Annotated[AsyncTransactionProducer, Depends(producer_dependency(producer))]``."""

    def dependency() -> C:
        return producer

    return dependency


def check_router(producer: AnyProducer, path: str = CHECK_PATH) -> APIRouter:
    """The push check-back route: the broker POSTs a check to ``path`` and reads the answer.  Give
    the producer ``CheckMode.push("<this service's base URL>" + path)``.

    When the producer has credentials, a check must be signed with them (the broker signs with
    the keys the producer heartbeats with): an unsigned, forged, stale or replayed one is answered
    401 and never reaches the checker.  A sync producer's checker runs in the threadpool."""
    router = APIRouter(tags=["halfmq"])
    verifier = check_verifier(producer.credentials)
    answer = _answerer(producer)

    @router.post(path)
    async def answer_check(request: Request) -> Response:
        body = await request.body()
        refused = refusal(verifier, request.method, _target(request), request.headers, body)
        if refused is not None:
            return Response(refusal_body(refused), refused.status, media_type="application/json")
        try:
            check = parse_check(body)
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "not a check"}, 400)
        state = await answer(check)
        return JSONResponse({"state": state.check_answer})

    return router


def _answerer(producer: AnyProducer) -> Callable[[Message], Awaitable[LocalTransactionState]]:
    """The producer's checker as a coroutine function (a sync one runs in the threadpool)."""
    if isinstance(producer, AsyncTransactionProducer):
        return producer.answer_check
    answer_sync = producer.answer_check

    async def answer(check: Message) -> LocalTransactionState:
        return await run_in_threadpool(answer_sync, check)

    return answer


def _target(request: Request) -> str:
    """The path and query as the broker sent them (what it signed), not as decoded by routing."""
    raw_path = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else quote(request.scope["path"])
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path
