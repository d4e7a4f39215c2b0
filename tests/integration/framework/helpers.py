"""Bounded waits on the broker's view of a transaction."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from framework import AsyncTransactionProducer, TransactionProducer


def wait_resolved(
    producer: TransactionProducer, transaction_id: str, timeout: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        record = producer.transaction(transaction_id)
        if record["state"] != "PREPARED" or time.monotonic() > deadline:
            return record
        time.sleep(0.05)


async def await_resolved(
    producer: AsyncTransactionProducer, transaction_id: str, within: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        record = await producer.transaction(transaction_id)
        if record["state"] != "PREPARED" or time.monotonic() > deadline:
            return record
        await asyncio.sleep(0.05)
