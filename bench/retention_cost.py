"""What a purge costs against what the same rows cost to write: the broker's own code, in process.

    python bench/retention_cost.py [--messages 60000] [--store sqlite|postgresql] [--runs 3]

Each run starts a fresh broker app in this process (its HTTP routes through httpx's ASGI
transport, its real store: a new SQLite file, or a scratch schema in PostgreSQL's ``test``
database), sends ``--messages`` messages in batches of ``--batch`` to a topic one consumer group
reads, receives and acks them all (1,000 a call), then runs one purge round with a clock past
the retention, with no pause between units.  It prints, per run, the seconds and the process CPU
per message of the sends, of the receive + ack, and of the purge (per message, and per row
purged: messages, deliveries and purged-id records), and the purge's CPU as a fraction of the
send's: what retention adds to each message's cost once it runs as fast as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from asgi_lifespan import LifespanManager
from sqlalchemy import create_engine, text

from broker_service.app import build_app
from broker_service.domain.clock import now_ms
from broker_service.domain.config import RetentionPolicy
from broker_service.domain.retention.service import RetentionService
from broker_service.settings import BrokerSettings
from broker_service.store import migrate

_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass
class Phase:
    seconds: float
    cpu: float


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> Phase:
    wall, cpu = _clock()
    return Phase(wall - start[0], cpu - start[1])


async def one_run(url: str, messages: int, batch: int) -> tuple[Phase, Phase, Phase, int]:
    migrate.upgrade(url)
    settings = BrokerSettings(
        database_url=url, scheduler=False, retention_wait_for_export=False, purge_batch=1000
    )
    app = build_app(settings)
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
            await client.post("/v1/topics", json={"name": "t", "queues": 4})
            group = {"name": "g", "consume_from": "FIRST_OFFSET"}
            await client.post("/v1/consumer-groups", json=group)
            await client.post("/v1/consumer-groups/g/subscriptions", json={"topic": "t"})
            start = _clock()
            for i in range(0, messages, batch):
                body = {"messages": [{"body": "x" * 100} for _ in range(min(batch, messages - i))]}
                r = await client.post("/v1/topics/t/messages:batch", json=body)
                r.raise_for_status()
            sending = _since(start)
            start = _clock()
            got = 0
            while got < messages:
                r = await client.post(
                    "/v1/consumer-groups/g/receive",
                    json={"client_id": "c", "max_messages": 1000, "wait_seconds": 0},
                )
                r.raise_for_status()
                handles = [m["receipt_handle"] for m in r.json()["messages"]]
                got += len(handles)
                r = await client.post(
                    "/v1/consumer-groups/g/ack", json={"receipt_handles": handles}
                )
                r.raise_for_status()
            consuming = _since(start)
            store = app.state.retention.store
            policy = RetentionPolicy(retention_ms=1000, wait_for_export=False, batch=1000)
            service = RetentionService(store, policy, lambda: now_ms() + 3_600_000)
            start = _clock()
            report = await service.purge(max_rows=10 * messages)
            purging = _since(start)
            rows = report.purged["messages"] + report.purged["deliveries"] + messages
            assert report.purged["messages"] == messages, report.purged
    return sending, consuming, purging, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    print(
        f"{args.store}, {args.messages:,} messages a run, batches of {args.batch}, "
        f"pid {os.getpid()}"
    )
    print(
        "run  send s  us cpu/msg | recv+ack s  us/msg | "
        "purge s  us/msg  us/row  rows/s | purge/send cpu"
    )
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            schema = f"retcost_{uuid.uuid4().hex[:8]}"
            if args.store == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'broker.db'}"
            else:
                engine = create_engine(_PG)
                with engine.begin() as conn:
                    conn.execute(text(f"CREATE SCHEMA {schema}"))
                url = f"{_PG}?options=-csearch_path%3D{schema}"
            try:
                send, consume, purge, rows = asyncio.run(one_run(url, args.messages, args.batch))
            finally:
                if args.store == "postgresql":
                    with engine.begin() as conn:
                        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
                    engine.dispose()
        n = args.messages
        ratio = purge.cpu / send.cpu
        ratios.append(ratio)
        print(
            f"{run + 1:>3}  {send.seconds:6.2f}  {send.cpu / n * 1e6:10.1f} | "
            f"{consume.seconds:10.2f}  {consume.cpu / n * 1e6:6.1f} | "
            f"{purge.seconds:7.2f}  {purge.cpu / n * 1e6:6.1f}  {purge.cpu / rows * 1e6:6.1f}  "
            f"{rows / purge.seconds:6,.0f} | {ratio:.3f}"
        )
    print(f"purge cpu / send cpu, median of {args.runs}: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
