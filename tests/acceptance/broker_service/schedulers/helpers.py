"""What the check-back tests ask of a running broker and of a producer's local database."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support import BrokerProcess

# The ``start_broker`` fixture (conftest.py): a broker with the module's ``broker_flags`` and more.
StartBroker = Callable[..., BrokerProcess]


def transaction_of(broker: BrokerProcess, txid: str) -> dict[str, Any]:
    """The transaction as ``GET /v1/transactions/{id}`` answers it."""
    result: dict[str, Any] = httpx.get(f"{broker.url}/v1/transactions/{txid}", timeout=5).json()
    return result


def create_topic(broker: BrokerProcess) -> None:
    """The topic ``transfers`` with two queues."""
    httpx.post(f"{broker.url}/v1/topics", json={"name": "transfers", "queues": 2}, timeout=5)


def answered_checks(local: Path) -> list[tuple[str, int, str]]:
    """The checks a producer program answered: ``(transaction_id, check_times, client)``."""
    with sqlite3.connect(local) as conn:
        return list(conn.execute("SELECT transaction_id, check_times, client FROM checks"))
