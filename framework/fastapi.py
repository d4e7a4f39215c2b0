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
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from framework.aio_producer import AsyncTransactionProducer
from framework.checkserver import CHECK_PATH
from framework.message import LocalTransactionState
from framework.producer import TransactionProducer
from framework.protocol import check_message

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
    the producer ``CheckMode.push("<this service's base URL>" + path)``."""
    router = APIRouter(tags=["halfmq"])

    if isinstance(producer, AsyncTransactionProducer):
        answer_async = producer.answer_check

        @router.post(path)
        async def answer_check_async(request: Request) -> JSONResponse:
            check = check_message(await request.json())
            return _answer(await answer_async(check))

    else:
        answer_sync = producer.answer_check

        @router.post(path)
        def answer_check_sync(payload: dict[str, Any]) -> JSONResponse:
            return _answer(answer_sync(check_message(payload)))

    return router


def _answer(state: LocalTransactionState) -> JSONResponse:
    return JSONResponse({"state": state.check_answer})
