"""A half stuck without a live instance piles up CHECKED events, one per round: all are kept, the
rounds go on recording them, and the transaction's page, its message's page and
GET /v1/transactions/{id}/checks read only the newest 200, the pages saying "N of M shown"
(both stores)."""

from __future__ import annotations

import asyncio
import re

import orjson

from broker_service.store.deliveries import CHECKED_READ_MAX
from broker_service.store.sqltx import SqlTx
from tests.support import BrokerApp

PILED = 250  # earlier rounds' checks, written straight into the trace


async def test_a_stuck_half_shows_its_newest_checks_and_how_many_there_are(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        transaction_timeout_seconds=0,
        transaction_check_interval_seconds=0.001,
    ) as broker:
        await broker.topic("transfers", 2)
        body = {"topic": "transfers", "producer_group": "bob-bank", "body": "debit"}
        half = (await broker.client.post("/v1/transactions", json=body)).json()
        txid, msg_id = half["transaction_id"], half["msg_id"]
        detail = {"transaction_id": txid, "check_times": 0, "failure": "no_live_instance"}
        piled = [
            (msg_id, "CHECKED", "broker-0", 1_000 + n, orjson.dumps(detail).decode())
            for n in range(PILED)
        ]

        def pile(tx: SqlTx) -> None:
            tx.add_traces(piled)

        service = broker.state.transactions
        await service.store.write(pile)
        for _ in range(2):  # no producer instance is alive: each round records a check
            await asyncio.sleep(0.01)
            report = await service.claim_round(10)
            assert report.skipped_no_producer == [txid]
        total = PILED + 2

        api = (await broker.client.get(f"/v1/transactions/{txid}/checks")).json()
        assert len(api["checks"]) == CHECKED_READ_MAX
        assert [c["failure"] for c in api["checks"][-2:]] == ["no_live_instance"] * 2
        assert api["checks"][-1]["at"] > "2000"  # the rounds' own, not the piled ones (1970)

        page = (await broker.client.get(f"/console/transactions/{txid}")).text
        shown = re.search(r'<p id="checks-shown"><strong>([\d,]+) of ([\d,]+) shown', page)
        assert shown is not None
        assert shown.groups() == (str(CHECKED_READ_MAX), str(total))
        table = re.search(r'<table id="checks">.*?</table>', page, re.S)
        assert table is not None
        assert table.group(0).count("<tr><td") == CHECKED_READ_MAX
        assert f"CHECKED: the newest {CHECKED_READ_MAX} of {total} shown" in page
        assert page.count('<li class="CHECKED">') == CHECKED_READ_MAX

        message = (await broker.client.get(f"/console/messages/{msg_id}")).text
        assert f"CHECKED: the newest {CHECKED_READ_MAX} of {total} shown" in message
        assert message.count('<li class="CHECKED">') == CHECKED_READ_MAX


async def test_a_few_checks_are_all_shown_without_a_count(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, transaction_timeout_seconds=0
    ) as broker:
        await broker.topic("transfers", 2)
        body = {"topic": "transfers", "producer_group": "bob-bank", "body": "debit"}
        txid = (await broker.client.post("/v1/transactions", json=body)).json()["transaction_id"]
        await broker.state.transactions.claim_round(10)
        page = (await broker.client.get(f"/console/transactions/{txid}")).text
        assert 'id="checks-shown"' not in page
        assert "no_live_instance" in page
