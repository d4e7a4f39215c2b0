"""The domain's services on the real SQL store (a temporary SQLite file), without HTTP, on a clock
the test moves by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from broker_service.domain.config import CheckPolicy, ConsumerConfig, DomainConfig
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.consumers.wakeup import Arrivals
from broker_service.domain.messages.sending import Sender
from broker_service.domain.messages.service import MessageService
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.service import TransactionService
from broker_service.store.sql_store import SqlStore
from tests.support import open_store


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


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SqlStore]:
    async with open_store(sqlite_url) as opened:
        yield opened


@pytest.fixture
def domain(store: SqlStore) -> Domain:
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
