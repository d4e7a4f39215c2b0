"""The processes of ``bench/peer_bench.py``, one role per process:

    python bench/peer/roles.py ROLE CONFIG_JSON

* ``hmq-producer`` / ``peer-producer``: the business transaction (one of 1,000 accounts updated,
  a ledger row inserted, a message) on ``tasks`` asyncio tasks, closed loop or paced; halfmq's
  through ``AsyncTransactionProducer.transactional`` (the automatic check mode), the peer's
  through ``OutboxBroker.publish(..., session=...)`` in the same transaction;
* ``hmq-consumer``: an ``AsyncPushConsumer``; ``peer-consumer``: a FastStream ``RabbitBroker``
  subscriber on a durable queue;
* ``peer-relay``: faststream-outbox's subscriber relaying the outbox rows to RabbitMQ (persistent
  messages, publisher confirms), configured for throughput as its documentation advises.

A producer prints ``ready`` once started, then reads ``t0 t1`` (epoch seconds) from its standard
input: it loads from then until ``t1`` (``t0`` is where the measured window starts: before it is
the warm-up) and writes its outcome (``commits``: id -> commit time, ``rolled_back``, ``errors``)
to ``out``.  A consumer or relay prints ``ready``; a consumer writes the number of distinct ids it
has handled to ``progress`` (for the drain) and, on SIGTERM, its deliveries (id -> handler times)
to ``out``.  Every process stops on SIGTERM; the orchestrator stops them by PID.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import contextlib

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

ACCOUNTS = 1_000
UPDATE = text("UPDATE accounts SET balance = balance + :amount WHERE id = :account")
LEDGER = text("INSERT INTO ledger (id, run, account, amount) VALUES (:id, :run, :account, :amount)")


class Rollback(Exception):
    """Raised inside a business transaction chosen to roll back (5 %)."""


def ready() -> None:
    print("ready", flush=True)


def write_json(path: str, data: object) -> None:
    Path(path).write_text(json.dumps(data))


async def stop_event() -> asyncio.Event:
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    return stopped


# -- the load: the same on both sides -------------------------------------------------------------


class Load:
    """Closed loop or paced: ``tasks`` tasks run ``one(tx_id, account, amount, rollback)`` until
    ``t1``; paced, transaction n starts at ``t_start + n / rate`` (late ones start at once)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.commits: dict[str, float] = {}
        self.decided: dict[str, float] = {}  # halfmq: the commit request answered (durable)
        self.rolled_back: list[str] = []
        self.errors: list[str] = []
        self.random = random.Random(config.get("seed", 7))
        self.next_slot = 0

    def track_commits(self) -> None:
        """Take each business transaction's commit time from SQLAlchemy's ``after_commit`` (the
        id is in ``session.info``): the same hook on both sides."""

        def committed(session: Session) -> None:
            tx_id = session.info.pop("tx", None)
            if tx_id is not None:
                self.commits[tx_id] = time.time()

        event.listen(Session, "after_commit", committed)

    async def run(self, one: Callable[[str, int, int, bool], Awaitable[None]], t1: float) -> None:
        rate = self.config["rate"]
        started = time.time()

        async def task() -> None:
            while time.time() < t1:
                if rate:
                    slot, self.next_slot = self.next_slot, self.next_slot + 1
                    delay = started + slot / rate - time.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if time.time() >= t1:
                        return
                tx_id = uuid.uuid4().hex
                account = self.random.randrange(1, ACCOUNTS + 1)
                rollback = self.random.random() < self.config["rollback"]
                try:
                    await one(tx_id, account, self.random.randrange(1, 100), rollback)
                except Rollback:
                    pass
                except Exception as exc:  # counted, not hidden: the report prints them
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                if rollback:
                    self.rolled_back.append(tx_id)

        await asyncio.gather(*(task() for _ in range(self.config["tasks"])))

    def outcome(self) -> dict[str, Any]:
        return {
            "commits": self.commits,
            "decided": self.decided,
            "rolled_back": self.rolled_back,
            "errors": self.errors,
        }


def window() -> float:
    """Wait for the orchestrator's ``t0 t1`` line; answer ``t1``."""
    line = sys.stdin.readline().split()
    return float(line[1])


def app_engine(config: dict[str, Any]) -> Any:
    return create_async_engine(config["app_url"], pool_size=config["tasks"] + 8, max_overflow=8)


# -- halfmq ---------------------------------------------------------------------------------------


async def hmq_producer(config: dict[str, Any]) -> None:
    from framework import AsyncTransactionProducer, LocalTransactionState, Message

    engine = app_engine(config)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    load = Load(config)
    load.track_commits()
    producer = AsyncTransactionProducer(
        "peer-bench",
        brokers=[config["broker"]],
        batch_linger_ms=config["linger_ms"],
        end_oneway=config["end_oneway"],
    )

    @producer.transactional(config["topic"], session_factory=sessions)
    async def transfer(session: AsyncSession, message: Message, arg: tuple[str, int, int, bool]):
        tx_id, account, amount, rollback = arg
        await session.execute(UPDATE, {"amount": amount, "account": account})
        await session.execute(
            LEDGER, {"id": tx_id, "run": config["run"], "account": account, "amount": amount}
        )
        if rollback:
            return LocalTransactionState.ROLLBACK_MESSAGE
        session.info["tx"] = tx_id
        return None

    async def one(tx_id: str, account: int, amount: int, rollback: bool) -> None:
        body = json.dumps({"id": tx_id, "account": account, "amount": amount})
        result = await producer.send_message_in_transaction(
            Message(config["topic"], body=body), arg=(tx_id, account, amount, rollback)
        )
        if result.error is not None:
            raise result.error
        if result.resolution == "COMMITTED":  # the broker's answer (none with end_oneway)
            load.decided[tx_id] = time.time()

    async with producer:
        ready()
        t1 = await asyncio.to_thread(window)
        await load.run(one, t1)
    await engine.dispose()
    write_json(config["out"], load.outcome())


async def hmq_consumer(config: dict[str, Any]) -> None:
    from framework import AsyncPushConsumer, Message

    stopped = await stop_event()
    seen: dict[str, list[float]] = {}
    consumer = AsyncPushConsumer(
        config["group"],
        brokers=[config["broker"]],
        consume_from="FIRST_OFFSET",
        batch_linger_ms=config["linger_ms"],
    )

    requests: dict[str, int] = {}

    async def count(request: Any) -> None:  # the consumer's requests, by the route's last part
        route = request.url.path.rsplit("/", 1)[-1]
        requests[route] = requests.get(route, 0) + 1

    consumer.client.http.event_hooks["request"].append(count)

    @consumer.subscribe(config["topic"])
    async def handle(message: Message) -> None:
        seen.setdefault(json.loads(message.text)["id"], []).append(time.time())

    async with consumer:
        ready()
        await report_progress(config["progress"], seen, stopped)
    write_json(config["out"], seen)
    write_json(config["out"] + ".requests", requests)


async def report_progress(path: str, seen: dict[str, list[float]], stopped: asyncio.Event) -> None:
    """Every 0.1 s, the number of distinct ids handled, written in place into ``path`` (one file
    kept open: the bench's own cost stays out of the consumer's CPU)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while not stopped.is_set():
            os.pwrite(fd, f"{len(seen):>12}".encode(), 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), 0.1)
    finally:
        os.close(fd)


# -- the peer: FastStream + faststream-outbox + RabbitMQ ------------------------------------------


def outbox_table() -> Any:
    from faststream_outbox import make_outbox_table
    from sqlalchemy import MetaData

    return make_outbox_table(MetaData(), table_name="outbox")


async def peer_producer(config: dict[str, Any]) -> None:
    from faststream_outbox import OutboxBroker

    engine = app_engine(config)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    outbox = OutboxBroker(engine, outbox_table=outbox_table(), logger=None)
    load = Load(config)
    load.track_commits()

    async def one(tx_id: str, account: int, amount: int, rollback: bool) -> None:
        async with sessions() as session, session.begin():
            await session.execute(UPDATE, {"amount": amount, "account": account})
            await session.execute(
                LEDGER, {"id": tx_id, "run": config["run"], "account": account, "amount": amount}
            )
            body = {"id": tx_id, "account": account, "amount": amount}
            await outbox.publish(body, queue=config["outbox_queue"], session=session)
            if rollback:
                raise Rollback
            session.info["tx"] = tx_id

    ready()
    t1 = await asyncio.to_thread(window)
    await load.run(one, t1)
    await engine.dispose()
    write_json(config["out"], load.outcome())


def rabbit_queue(name: str) -> Any:
    from faststream.rabbit import RabbitQueue

    return RabbitQueue(name, durable=True)


async def peer_relay(config: dict[str, Any]) -> None:
    """faststream-outbox's relay as its docs advise for throughput: asyncpg (LISTEN/NOTIFY wakes
    the fetch loop), several workers, a bigger fetch batch and the batched terminal DELETE
    (``terminal_flush_batch_size``); the relay's handler returns the body, which the stacked
    RabbitMQ publisher publishes (persistent, with the channel's publisher confirms)."""
    from faststream.rabbit import RabbitBroker
    from faststream_outbox import OutboxBroker

    stopped = await stop_event()
    engine = create_async_engine(config["app_url"], pool_size=16, max_overflow=8)
    outbox = OutboxBroker(engine, outbox_table=outbox_table(), logger=None)
    rabbit = RabbitBroker(config["amqp"], logger=None)
    publisher = rabbit.publisher(rabbit_queue(config["rabbit_queue"]), persist=True)
    relay = config["relay"]

    @publisher
    @outbox.subscriber(
        config["outbox_queue"],
        max_workers=relay["max_workers"],
        fetch_batch_size=relay["fetch_batch_size"],
        min_fetch_interval=relay["min_fetch_interval"],
        max_fetch_interval=relay["max_fetch_interval"],
        terminal_flush_batch_size=relay["terminal_flush_batch_size"],
    )
    async def forward(body: dict[str, Any]) -> dict[str, Any]:
        return body

    await rabbit.start()
    await outbox.start()
    ready()
    await stopped.wait()
    await outbox.stop()
    await rabbit.stop()
    await engine.dispose()


async def peer_consumer(config: dict[str, Any]) -> None:
    from faststream.rabbit import RabbitBroker

    stopped = await stop_event()
    seen: dict[str, list[float]] = {}
    rabbit = RabbitBroker(config["amqp"], logger=None)

    @rabbit.subscriber(rabbit_queue(config["rabbit_queue"]))
    async def handle(body: dict[str, Any]) -> None:
        seen.setdefault(body["id"], []).append(time.time())

    await rabbit.start()
    ready()
    await report_progress(config["progress"], seen, stopped)
    await rabbit.stop()
    write_json(config["out"], seen)


ROLES: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
    "hmq-producer": hmq_producer,
    "hmq-consumer": hmq_consumer,
    "peer-producer": peer_producer,
    "peer-relay": peer_relay,
    "peer-consumer": peer_consumer,
}

if __name__ == "__main__":
    import uvloop

    uvloop.run(ROLES[sys.argv[1]](json.loads(sys.argv[2])))
