"""Fixtures of the framework's tests: the real broker (in process through ``halfmq.testing``,
or as a subprocess), and a user's own database (a SQLite file or a PostgreSQL schema)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from framework import AsyncTransactionProducer, CheckMode, TransactionProducer
from framework.aio_consumer import AsyncPushConsumer
from framework.consumer import PushConsumer
from framework.tables import create_tables
from halfmq.testing import InProcessBroker
from tests.support import BrokerProcess, free_port

# Retry k waits delay level 3 + k: 300 ms, 400 ms, ...
LEVELS = " ".join(f"{100 * n}ms" for n in range(1, 19))
FAST = {
    "transaction_timeout_seconds": 0.3,
    "transaction_check_interval_seconds": 0.2,
    "message_delay_level": LEVELS,
}
FAST_FLAGS = (
    "--transaction-timeout-seconds", "0.5",
    "--transaction-check-interval-seconds", "0.3",
    "--producer-expiry-seconds", "5",
    "--check-timeout-seconds", "5",
    "--message-delay-level", LEVELS,
)  # fmt: skip
PULL = CheckMode.pull(wait_seconds=0.3)

bank_metadata = MetaData()
effects = Table(
    "effects",
    bank_metadata,
    Column("key", String(64), primary_key=True),
    Column("amount", Integer, nullable=False, default=0),
)


@dataclass
class Bank:
    """A user's service database: its own ``effects`` table plus the framework's tables."""

    url: str
    engine: Engine
    Session: sessionmaker[Session]

    def effects(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(select(effects.c.key)))

    def count(self, table: Table) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def make_bank(url: str) -> Bank:
    engine = create_engine(url)
    bank_metadata.create_all(engine)
    create_tables(engine)
    return Bank(url, engine, sessionmaker(engine))


def close_bank(bank: Bank) -> None:
    """Dispose of the bank's engine once nothing holds one of its connections.

    A test asks for ``bank`` before the producers and consumers that use it: fixtures are torn
    down in the reverse order, so the clients stop (a consumer finishing the handler that runs)
    before this.  A connection still out here was taken by a client still running; disposing of
    the engine under it would leave it to be closed by the garbage collector, in a later test."""
    out = bank.engine.pool.checkedout()  # type: ignore[attr-defined]
    bank.engine.dispose()
    assert out == 0, f"{out} connection(s) of the bank still in use: ask for `bank` first"


@pytest.fixture(params=["sqlite", "postgresql"])
def bank(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bank]:
    """A user's database on SQLite and on PostgreSQL; ask for it before the clients using it."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'bank.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    made = make_bank(url)
    yield made
    close_bank(made)


@pytest.fixture
def inproc() -> Iterator[InProcessBroker]:
    """The real broker in this process (sync face), with a topic ``transfers``."""
    with InProcessBroker(**FAST) as broker:
        broker.create_topic("transfers")
        yield broker


@pytest.fixture
async def ainproc() -> AsyncIterator[InProcessBroker]:
    """The real broker in this process (async face), with a topic ``transfers``."""
    async with InProcessBroker(**FAST) as broker:
        await broker.acreate_topic("transfers")
        yield broker


@pytest.fixture
def producers(inproc: InProcessBroker) -> Iterator[Callable[..., TransactionProducer]]:
    """Build producers on the in-process broker; every one is shut down afterwards."""
    made: list[TransactionProducer] = []

    def make(group: str = "bob-bank", **options: Any) -> TransactionProducer:
        options.setdefault("check", PULL)
        producer = TransactionProducer(
            group, brokers=[inproc.url], transport=inproc.transport, **options
        )
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.shutdown()


@pytest.fixture
async def aproducers(
    ainproc: InProcessBroker,
) -> AsyncIterator[Callable[..., AsyncTransactionProducer]]:
    made: list[AsyncTransactionProducer] = []

    def make(group: str = "bob-bank", **options: Any) -> AsyncTransactionProducer:
        options.setdefault("check", PULL)
        producer = AsyncTransactionProducer(
            group, brokers=[ainproc.url], transport=ainproc.async_transport, **options
        )
        made.append(producer)
        return producer

    yield make
    for producer in made:
        await producer.shutdown()


@pytest.fixture
def consumers(inproc: InProcessBroker) -> Iterator[Callable[..., PushConsumer]]:
    """Build consumers on the in-process broker (fast polls); every one is shut down afterwards."""
    made: list[PushConsumer] = []

    def make(group: str = "smith-bank", **options: Any) -> PushConsumer:
        options.setdefault("wait_seconds", 0.5)
        options.setdefault("consume_from", "FIRST_OFFSET")
        consumer = PushConsumer(group, brokers=[inproc.url], transport=inproc.transport, **options)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.shutdown()


@pytest.fixture
async def aconsumers(
    ainproc: InProcessBroker,
) -> AsyncIterator[Callable[..., AsyncPushConsumer]]:
    made: list[AsyncPushConsumer] = []

    def make(group: str = "smith-bank", **options: Any) -> AsyncPushConsumer:
        options.setdefault("wait_seconds", 0.5)
        options.setdefault("consume_from", "FIRST_OFFSET")
        consumer = AsyncPushConsumer(
            group, brokers=[ainproc.url], transport=ainproc.async_transport, **options
        )
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        await consumer.shutdown()


@pytest.fixture(scope="module")
def sqlite_broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The real broker as a subprocess on a SQLite file, over real HTTP, fast check-back (one per
    test module: tests use their own producer groups)."""
    from broker_service.store import migrate

    tmp_path = tmp_path_factory.mktemp("broker")
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    migrate.upgrade(url)
    process = BrokerProcess(url, free_port(), tmp_path / "broker.log", *FAST_FLAGS)
    process.start()
    try:
        yield process
    finally:
        process.stop()
