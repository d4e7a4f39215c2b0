"""FastAPI integration: the lifespan starts and stops the producer, a dependency hands it to
routes, and the check router answers the broker's push body (no TestClient: httpx + lifespan)."""

from __future__ import annotations

from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from fastapi import Depends, FastAPI

from framework import AsyncTransactionProducer, LocalTransactionState, Message, TransactionProducer
from framework.fastapi import check_router, halfmq_lifespan, producer_dependency
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import PULL

State = LocalTransactionState


def _service(producer: Any) -> FastAPI:
    app = FastAPI(lifespan=halfmq_lifespan(producer))
    app.include_router(check_router(producer))
    dependency = Depends(producer_dependency(producer))

    @app.post("/transfers/{key}")
    async def transfer(key: str, producer: Any = dependency) -> dict[str, Any]:
        message = Message("transfers", keys=[key], body="100")
        if isinstance(producer, AsyncTransactionProducer):
            result = await producer.send_message_in_transaction(message)
        else:
            result = producer.send_message_in_transaction(message)
        return {"transaction_id": result.transaction_id, "resolution": result.resolution}

    return app


async def test_async_producer_in_a_fastapi_service(ainproc: InProcessBroker) -> None:
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=ainproc.async_transport, check=PULL
    )
    producer.execute_local_transaction("transfers")(lambda m, a: State.COMMIT_MESSAGE)
    producer.check_local_transaction("transfers")(lambda m: State.ROLLBACK_MESSAGE)
    app = _service(producer)
    async with LifespanManager(app) as manager:
        assert producer.started
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bob") as client:
            answer = (await client.post("/transfers/t-1")).json()
            assert answer["resolution"] == "COMMITTED"
            check = {
                "transaction_id": answer["transaction_id"],
                "producer_group": "bob-bank",
                "msg_id": "m-1",
                "topic": "transfers",
                "tags": None,
                "keys": ["t-1"],
                "body": "100",
                "encoding": "utf-8",
                "properties": {},
                "check_times": 1,
            }
            pushed = await client.post("/halfmq/check", json=check)
            assert pushed.json() == {"state": "ROLLBACK"}
    assert not producer.started


async def test_sync_producer_in_a_fastapi_service(tmp_path: Any) -> None:
    with InProcessBroker() as broker:
        broker.create_topic("transfers")
        producer = TransactionProducer(
            "bob-bank", brokers=[broker.url], transport=broker.transport, check=PULL
        )
        producer.execute_local_transaction("transfers")(lambda m, a: State.ROLLBACK_MESSAGE)
        producer.check_local_transaction("transfers")(lambda m: None)
        app = _service(producer)
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bob") as client:
                answer = (await client.post("/transfers/t-2")).json()
                pushed = await client.post(
                    "/halfmq/check",
                    json={"transaction_id": "x", "msg_id": "m", "topic": "transfers", "body": ""},
                )
        assert answer["resolution"] == "ROLLED_BACK"
        assert pushed.json() == {"state": "UNKNOWN"}
        assert not producer.started
