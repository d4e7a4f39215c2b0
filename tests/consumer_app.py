"""A real consumer process for kill tests: it receives one batch, acks part of it, prints one JSON
line ``{"acked": [...], "held": [...]}`` and then hangs mid-batch until it is killed.

    python -m tests.consumer_app URL GROUP CLIENT_ID [--max 16] [--invisible 1] [--ack-first 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import httpx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("group")
    parser.add_argument("client_id")
    parser.add_argument("--max", type=int, default=16)
    parser.add_argument("--invisible", type=float, default=1.0)
    parser.add_argument("--ack-first", type=int, default=4)
    args = parser.parse_args()
    with httpx.Client(base_url=args.url, timeout=30) as client:
        received = client.post(
            f"/v1/consumer-groups/{args.group}/receive",
            json={
                "client_id": args.client_id,
                "max_messages": args.max,
                "invisible_seconds": args.invisible,
                "wait_seconds": 10,
            },
        )
        received.raise_for_status()
        messages = received.json()["messages"]
        first, rest = messages[: args.ack_first], messages[args.ack_first :]
        if first:
            acked = client.post(
                f"/v1/consumer-groups/{args.group}/ack",
                json={"receipt_handles": [m["receipt_handle"] for m in first]},
            )
            acked.raise_for_status()
            assert acked.json()["stale"] == []
    line = {"acked": [m["msg_id"] for m in first], "held": [m["msg_id"] for m in rest]}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    time.sleep(120)  # mid-batch: the held messages are never acked


if __name__ == "__main__":
    main()
