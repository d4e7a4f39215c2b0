"""``GET /v1/brokers`` and the console's overview on both stores: two brokers (two apps in this
process) sharing one store both appear live; once one stops it turns not live after three of its
beats, and the overview says when it was last seen."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from tests.support import BrokerApp

BEAT = 0.1  # broker_beat_seconds: live while seen within 0.3 s


async def _brokers(broker: BrokerApp) -> dict[str, dict[str, Any]]:
    response = await broker.client.get("/v1/brokers")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["beat_seconds"] == BEAT
    return {b["broker_id"]: b for b in answer["brokers"]}


async def _until(broker: BrokerApp, wanted: dict[str, bool], seconds: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        found = await _brokers(broker)
        if {k: found[k]["live"] for k in wanted if k in found} == wanted:
            return found
        assert time.monotonic() < deadline, (wanted, found)
        await asyncio.sleep(BEAT / 2)


async def test_two_brokers_sharing_a_store_are_listed_and_a_stopped_one_turns_not_live(
    migrated_url: str,
) -> None:
    common = {"database_url": migrated_url, "scheduler": False, "broker_beat_seconds": BEAT}
    async with BrokerApp.start(broker_id="b-one", port=9101, **common) as one:
        async with BrokerApp.start(broker_id="b-two", host="127.0.0.2", port=9102, **common):
            found = await _until(one, {"b-one": True, "b-two": True})
            two = found["b-two"]
            assert two["address"] == "127.0.0.2:9102"
            assert two["store"] == ("sqlite" if migrated_url.startswith("sqlite") else "postgresql")
            assert two["version"]
            assert two["started_at"].endswith("Z")
            assert two["last_seen_at"] >= two["started_at"]
            page = (await one.client.get("/console")).text
            listed = re.search(r'<table id="brokers">.*?</table>', page, re.S)
            assert listed is not None
            assert "b-one" in listed.group(0)
            assert "b-two" in listed.group(0)
            assert listed.group(0).count(">live<") == 2
        # b-two stopped: its row stays, not live once three of its beats have passed.
        found = await _until(one, {"b-one": True, "b-two": False})
        assert found["b-two"]["seen_seconds_ago"] > 3 * BEAT
        assert list(found) == ["b-one", "b-two"]  # the live one first
        page = (await one.client.get("/console")).text
        listed = re.search(r'<table id="brokers">.*?</table>', page, re.S)
        assert listed is not None
        row = re.search(r"<tr class=\"gone\">.*?</tr>", listed.group(0), re.S)
        assert row is not None
        assert "b-two" in row.group(0)
        assert re.search(r"last seen \d+ s ago", row.group(0))
        assert "b-one" not in row.group(0)
