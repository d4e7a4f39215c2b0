"""The demo's dropped commits (issue 29, item 9): a ``drop-commit`` transfer's commit is lost
whether the producer sends it alone or in a request shared with other decisions, so every one
is committed by the check-back -- a demo that planned 65 saw only 25 of them so, the rest's
commits having gone through in shared requests.  And Bob takes the caller's transfer id."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo_bank import bob
from demo_bank.faults import DROP_COMMIT, FAULT_HEADER
from demo_bank.settings import TOPIC, BankSettings
from halfmq.testing import InProcessBroker
from tests.integration.demo_bank.test_banks import LEVELS, bank_url, broker_state, serve, wait_for

DOOMED, PLAIN = 12, 12


@pytest.fixture
def broker() -> Iterator[InProcessBroker]:
    with InProcessBroker(message_delay_level=LEVELS) as running:
        running.create_topic(TOPIC)
        yield running


async def test_every_dropped_commit_is_left_to_the_check_back_even_in_a_shared_request(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    settings = BankSettings(
        database_url=bank_url(tmp_path, "bob"), broker=broker.url, faults=True,
        check_wait_seconds=0.3,
    )  # fmt: skip
    app = bob.create_app(settings, transport=broker.transport)
    async with serve(app) as client:
        await client.post("/accounts", json={"account_id": "bob-1", "balance": 1_000_000})

        async def transfer(n: int, doomed: bool) -> dict[str, str]:
            headers = {FAULT_HEADER: DROP_COMMIT} if doomed else {}
            body = {"from": "bob-1", "to": "smith-1", "amount": 5, "transfer_id": f"t-{n}"}
            answer = await client.post("/transfers", json=body, headers=headers)
            assert answer.status_code == 201, answer.text
            return dict(answer.json())

        # All at once: their decisions meet in the producer and share requests.
        answers = await asyncio.gather(*(transfer(n, n < DOOMED) for n in range(DOOMED + PLAIN)))
        assert [a["transfer_id"] for a in answers] == [f"t-{n}" for n in range(DOOMED + PLAIN)]
        states = [a["state"] for a in answers]
        assert states == ["COMMIT_PENDING"] * DOOMED + ["COMMITTED"] * PLAIN
        for accepted in answers[:DOOMED]:
            txid = accepted["transaction_id"]
            wait_for(lambda t=txid: broker_state(broker, t)["state"] == "COMMITTED", 30, "checks")
        resolved_by = [broker_state(broker, a["transaction_id"])["resolved_by"] for a in answers]
        assert resolved_by == ["check"] * DOOMED + ["producer"] * PLAIN

        # A transfer id Bob's ledger already has is refused, and nothing is debited again.
        again = await client.post(
            "/transfers", json={"from": "bob-1", "to": "smith-1", "amount": 5, "transfer_id": "t-0"}
        )
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "TRANSFER_EXISTS"
        bad = await client.post(
            "/transfers", json={"from": "bob-1", "to": "smith-1", "amount": 5, "transfer_id": "a b"}
        )
        assert bad.status_code == 422
        balance = (await client.get("/accounts/bob-1")).json()["balance"]
        assert balance == 1_000_000 - 5 * (DOOMED + PLAIN)
