"""A dead letter that an operator resent and its group then acked, made by the real broker (its
REST API on a SQLite store), is reported by the nightly job as ``dead_letter_resolved`` (info)
and leaves the day clean: exit 0, not "warnings"."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

import httpx

from halfmq.testing import InProcessBroker
from spark_reconcile.config import ReconcileConfig, now_ms
from spark_reconcile.job import run

pytestmark = pytest.mark.spark

GROUP = "bank-smith"
TOPIC = "transfers"


def receive_one(client: httpx.Client) -> dict[str, Any]:
    answer = client.post(
        f"/v1/consumer-groups/{GROUP}/receive",
        json={"client_id": "smith-1", "max_messages": 1, "wait_seconds": 5},
    )
    answer.raise_for_status()
    messages = answer.json()["messages"]
    assert len(messages) == 1, messages
    return dict(messages[0])


def resend_after_dead_letter(store_url: str) -> str:
    """A committed transfer the group nacks into its DLQ (no retries allowed), an operator
    resends, and the group receives again and acks.  Returns the transaction id."""
    with InProcessBroker(database_url=store_url) as broker, broker.client() as client:
        broker.create_topic(TOPIC)
        group = {"name": GROUP, "max_reconsume_times": 0, "consume_from": "FIRST_OFFSET"}
        client.post("/v1/consumer-groups", json=group).raise_for_status()
        subscription = {"topic": TOPIC, "expression": "*"}
        client.post(f"/v1/consumer-groups/{GROUP}/subscriptions", json=subscription)
        half = {"topic": TOPIC, "producer_group": "bank-bob", "body": "7", "keys": ["t-1"]}
        created = client.post("/v1/transactions", json=half)
        created.raise_for_status()
        transaction_id = str(created.json()["transaction_id"])
        decision = {"producer_group": "bank-bob"}
        client.post(f"/v1/transactions/{transaction_id}/commit", json=decision).raise_for_status()

        first = receive_one(client)
        nack = {"receipt_handle": first["receipt_handle"]}
        nacked = client.post(f"/v1/consumer-groups/{GROUP}/nack", json=nack)
        assert nacked.json()["outcome"] == "DLQ"
        resent = client.post(f"/v1/consumer-groups/{GROUP}/dlq/{first['msg_id']}/resend")
        resent.raise_for_status()
        again = receive_one(client)
        assert again["msg_id"] == first["msg_id"]
        acked = client.post(
            f"/v1/consumer-groups/{GROUP}/ack", json={"receipt_handles": [again["receipt_handle"]]}
        )
        assert acked.json()["acked"] == 1
    return transaction_id


def test_a_resent_and_acked_dead_letter_is_resolved_and_the_day_clean(
    spark: Any, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'broker.db'}"
    transaction_id = resend_after_dead_letter(store_url)
    out = tmp_path / "out"
    now = now_ms()
    day = dt.datetime.fromtimestamp(now / 1000, dt.UTC).date()
    config = ReconcileConfig(
        day=day, out=str(out), store_url=store_url, as_of=now, shuffle_partitions=2
    )
    summary = run(config, spark)

    found = spark.read.parquet(str(out / "anomalies")).collect()
    assert [(r["kind"], r["severity"], r["transaction_id"]) for r in found] == [
        ("dead_letter_resolved", "info", transaction_id)
    ]
    assert found[0]["consumer_group"] == GROUP
    assert (summary.status, summary.exit_code) == ("clean", 0)
    data = json.loads((out / "report" / f"date={day}" / "summary.json").read_text())
    assert (data["status"], data["warning"], data["info"]) == ("clean", 0, 1)
