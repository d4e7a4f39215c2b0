"""The domain's tests on each store: the real SQL store (a temporary SQLite file, and PostgreSQL
where a test asks for ``any_store`` or runs a broker) and the in-memory store
(:mod:`broker_service.memstore`), which passes the same tests.

* ``store`` (SQLite, memory) and ``any_store`` (SQLite, PostgreSQL, memory): the domain's services
  without HTTP (``domain``), on a clock the test moves by hand.
* ``store_url`` and ``migrated_url`` (SQLite, PostgreSQL, memory): what the brokers of these tests
  start on (``broker``, ``BrokerApp.start``); on memory, ``tests.support.MEMORY_URL`` starts the
  in-process broker on the in-memory store.  A test that can only run on a SQL store (it reads
  the store's tables, or starts a broker process) says so, with why, by
  ``@pytest.mark.parametrize("store_url", SQL_STORES, indirect=True)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from broker_service.domain.config import CheckPolicy, ConsumerConfig, DomainConfig
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.consumers.wakeup import Arrivals
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.ports import Store
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.service import TransactionService
from broker_service.memstore import MemoryStore
from tests.conftest import migrated, sql_store_fixture
from tests.support import MEMORY_URL, open_store

# The stores the ``store`` and ``any_store`` fixtures give, by the name a test's id carries.
STORES = ("sqlite", "memory")
EVERY_STORE = ("sqlite", "postgresql", "memory")
SQL_STORES = ("sqlite", "postgresql")


@dataclass
class Clock:
    now: int = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class Domain:
    clock: Clock
    messages: MessageService
    transactions: TransactionService
    consumers: ConsumerService


async def _opened(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if kind == "memory":
        memory = MemoryStore()
        yield memory
        memory.close()
        return
    url: str = request.getfixturevalue("sqlite_url" if kind == "sqlite" else "pg_migrated_url")
    async with open_store(url) as opened:
        yield opened


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    async for opened in _opened(request.param, request):
        yield opened


@pytest.fixture(params=EVERY_STORE)
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Every store: for the tests of what the SQL stores' dialects might do apart."""
    async for opened in _opened(request.param, request):
        yield opened


@pytest.fixture(params=EVERY_STORE)
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store a broker of these tests runs on (the root conftest's, and memory)."""
    if request.param == "memory":
        return MEMORY_URL
    url: str = request.getfixturevalue(sql_store_fixture(request.param, request))
    return url


@pytest.fixture
def migrated_url(store_url: str, request: pytest.FixtureRequest) -> str:
    """The root conftest's ``migrated_url``, and the memory store's URL as it is."""
    if store_url == MEMORY_URL:
        return store_url
    return migrated(store_url, request)


@pytest.fixture
def domain(store: Store) -> Domain:
    clock = Clock()
    sender = Sender(DomainConfig(), clock=clock)
    consumers = ConsumerService(
        store, ConsumerConfig(max_reconsume_times=2), Arrivals(), clock=clock
    )
    return Domain(
        clock,
        MessageService(store, sender),
        TransactionService(store, sender, CheckBack(CheckPolicy(), clock)),
        consumers,
    )
