"""Acks riding on the next receive (``POST .../ack-and-receive``): both push consumers carry the
acks of what their handlers consumed on the receive that follows -- every message consumed once,
every one acked (nothing in flight once done) -- and without sharing (``batch_linger_ms=0``), or against a broker without the route, they ack in
requests of their own, as before."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from framework import AsyncTransactionProducer, Message, PushConsumer, TransactionProducer
from framework.acks import AckRiders
from framework.aio_consumer import AsyncPushConsumer
from halfmq.testing import InProcessBroker

RIDE = "/ack-and-receive"


class Counted(httpx.AsyncBaseTransport, httpx.BaseTransport):
    """The in-process broker's transport, counting the requests per route's last path segment;
    with ``without_route`` it answers the ack-and-receive route as a broker that predates it."""

    def __init__(self, inner: Any, *, without_route: bool = False, slow: float = 0.0) -> None:
        self.inner = inner
        self.without_route = without_route
        self.slow = slow  # seconds an ack-and-receive waits before it reaches the broker
        self.paths: Counter[str] = Counter()
        self.carried = 0  # acks that rode on a receive

    def _note(self, request: httpx.Request) -> httpx.Response | None:
        path = request.url.path
        self.paths[path.rsplit("/", 1)[-1]] += 1
        if not path.endswith(RIDE):
            return None
        if self.without_route:
            error = {"error": {"code": "NOT_FOUND", "message": "Not Found", "detail": {}}}
            return httpx.Response(404, json=error, request=request)
        self.carried += len(orjson.loads(request.content)["receipt_handles"])
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        answer = self._note(request)
        if self.slow and request.url.path.endswith(RIDE):
            await asyncio.sleep(self.slow)
        return answer or await self.inner.handle_async_request(request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        answer = self._note(request)
        return answer or self.inner.handle_request(request)


async def _eventually(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def _settled(broker: InProcessBroker) -> dict[str, Any]:
    async with broker.async_client() as client:
        view: dict[str, Any] = (await client.get("/v1/consumer-groups/smith-bank")).json()
    return view


async def _send(broker: InProcessBroker, count: int) -> None:
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[broker.url], transport=broker.async_transport
    )
    try:
        for n in range(count):
            await producer.send(Message("transfers", body=str(n)))
    finally:
        await producer.shutdown()


async def _consume_async(
    ainproc: InProcessBroker, transport: Counted, count: int, **options: Any
) -> Counter[str]:
    seen: Counter[str] = Counter()
    consumer = AsyncPushConsumer(
        "smith-bank",
        brokers=[ainproc.url],
        transport=transport,
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
        **options,
    )

    @consumer.subscribe("transfers")
    async def credit(message: Message) -> None:
        seen[message.text] += 1
        await asyncio.sleep(0.001)

    async with consumer:
        await _send(ainproc, count)
        await _eventually(lambda: len(seen) == count, 20, f"{count} messages")
        await asyncio.sleep(0.3)
    return seen


async def test_the_async_consumers_acks_ride_on_its_receives(ainproc: InProcessBroker) -> None:
    transport = Counted(ainproc.async_transport)
    seen = await _consume_async(ainproc, transport, 60, concurrency=4, batch_size=16)
    assert set(seen.values()) == {1}, "each message consumed once"
    assert len(seen) == 60
    view = await _settled(ainproc)
    assert (view["lag"], view["in_flight"], view["retrying"]) == (0, 0, 0), "every one acked"
    assert transport.carried > 0, transport.paths


async def test_without_sharing_every_ack_goes_alone(ainproc: InProcessBroker) -> None:
    transport = Counted(ainproc.async_transport)
    seen = await _consume_async(ainproc, transport, 20, batch_linger_ms=0)
    assert len(seen) == 20
    assert transport.paths["ack-and-receive"] == 0
    assert transport.paths["ack"] == 20, "one ack request per message, as documented"


async def test_a_broker_without_the_route_gets_its_acks_alone(ainproc: InProcessBroker) -> None:
    transport = Counted(ainproc.async_transport, without_route=True)
    seen = await _consume_async(ainproc, transport, 30, concurrency=4, batch_size=8)
    assert set(seen.values()) == {1}
    assert len(seen) == 30
    view = await _settled(ainproc)
    assert (view["lag"], view["in_flight"]) == (0, 0), "the refused riders were acked alone"
    assert transport.paths["ack-and-receive"] == 1, "asked once, then never again"


def test_the_sync_consumers_acks_ride_on_its_receives(inproc: InProcessBroker) -> None:
    transport = Counted(inproc.transport)
    seen: Counter[str] = Counter()
    consumer = PushConsumer(
        "smith-bank",
        brokers=[inproc.url],
        transport=transport,
        wait_seconds=0.5,
        consume_from="FIRST_OFFSET",
        concurrency=4,
        batch_size=16,
    )

    @consumer.subscribe("transfers")
    def credit(message: Message) -> None:
        seen[message.text] += 1
        time.sleep(0.001)

    producer = TransactionProducer("bob-bank", brokers=[inproc.url], transport=inproc.transport)
    with consumer:
        for n in range(60):
            producer.send(Message("transfers", body=str(n)))
        producer.shutdown()
        deadline = time.monotonic() + 20
        while len(seen) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    assert set(seen.values()) == {1}
    assert len(seen) == 60
    with inproc.client() as client:
        view = client.get("/v1/consumer-groups/smith-bank").json()
    assert (view["lag"], view["in_flight"], view["retrying"]) == (0, 0, 0)
    assert transport.carried > 0, transport.paths


def test_an_ack_rides_only_through_an_open_door_and_within_the_routes_limit() -> None:
    riders = AckRiders(3)
    assert not riders.offer(["a"]), "shut: the ack goes alone"
    riders.open()
    assert riders.offer(["a", "b"])
    assert not riders.offer(["c", "d"]), "past the most one request takes: alone"
    assert riders.offer(["c"])
    assert riders.take() == ["a", "b", "c"]
    assert not riders.offer(["e"]), "taking shuts the door"
    assert riders.take() == []


async def test_shutdown_right_after_the_handlers_leaves_no_ack_behind(
    ainproc: InProcessBroker,
) -> None:
    """The acks waiting for a receive, or riding on one that shutdown cancels before it reached
    the broker, are sent alone: nothing handled stays in flight to come again."""
    transport = Counted(ainproc.async_transport, slow=1.0)
    seen: Counter[str] = Counter()
    consumer = AsyncPushConsumer(
        "smith-bank",
        brokers=[ainproc.url],
        transport=transport,
        wait_seconds=5,
        consume_from="FIRST_OFFSET",
    )

    @consumer.subscribe("transfers")
    async def credit(message: Message) -> None:
        seen[message.text] += 1

    await _send(ainproc, 40)
    async with consumer:
        await _eventually(lambda: len(seen) == 40, 20, "40 messages")
    view = await _settled(ainproc)
    assert (view["lag"], view["in_flight"]) == (0, 0), transport.paths
    assert set(seen.values()) == {1}
