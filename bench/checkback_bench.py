"""A check-back round costs index lookups of the due halves, not a scan of the pending ones.

    python bench/checkback_bench.py [--pending 10000,1000000] [--due 1000] [--stores sqlite,postgresql]

For each store and each pending count it fills a fresh store with that many PREPARED halves (half
message + transactions row; all but ``--due`` of them not due for an hour), then times one full
check round -- the broker's own scheduler code claiming every due half in slices, here with no live
producer so each due half is rescheduled -- and prints the round time and its ratio to the
smallest pending count's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, insert, text

from broker_service.domain.config import CheckPolicy, DomainConfig
from broker_service.domain.messages.sending import Sender
from broker_service.domain.transactions.checkback import CheckBack
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics
from broker_service.schedulers.checkback import CheckBackScheduler
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.schema import messages, queues, topics, transactions
from broker_service.store.sql_store import SqlStore

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CHUNK = 20_000


def fill(url: str, pending: int, due: int) -> None:
    now = int(time.time() * 1000)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(topics).values(name="transfers", queues=1, created_at=now))
        conn.execute(
            insert(queues),
            [
                {"topic": "transfers", "queue_id": 0, "next_offset": 0},
                {"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queue_id": 0, "next_offset": pending},
            ],
        )
    for start in range(0, pending, CHUNK):
        stop = min(pending, start + CHUNK)
        halves, records = [], []
        for n in range(start, stop):
            txid = f"tx-{n:09d}"
            halves.append(
                {
                    "topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queue_id": 0, "queue_offset": n,
                    "msg_id": f"m-{n:09d}", "body": b"transfer", "encoding": "utf-8",
                    "properties": '{"REAL_TOPIC":"transfers","REAL_QID":"0","PGROUP":"bob"}',
                    "transaction_id": txid, "producer_group": "bob",
                    "born_at": now, "stored_at": now,
                }
            )  # fmt: skip
            records.append(
                {
                    "transaction_id": txid, "msg_id": f"m-{n:09d}", "producer_group": "bob",
                    "topic": "transfers", "half_offset": n, "real_queue_id": 0,
                    "state": "PREPARED", "check_times": 0, "created_at": now,
                    "next_check_at": now - 1000 if n < due else now + 3_600_000,
                }
            )  # fmt: skip
        with engine.begin() as conn:
            conn.execute(insert(messages), halves)
            conn.execute(insert(transactions), records)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
    engine.dispose()


async def one_round(url: str) -> tuple[float, int]:
    settings = BrokerSettings(database_url=url, transaction_check_interval_seconds=3600)
    store = SqlStore(settings)
    store.open(create_sqlite=False)
    try:
        sender = Sender(DomainConfig())
        policy = CheckPolicy(interval_ms=3_600_000, broker_id="bench")
        service = TransactionService(store, sender, CheckBack(policy, sender.clock))
        scheduler = CheckBackScheduler(
            service,
            BrokerMetrics(),
            PullHub(),
            interval_seconds=3600,
            push_timeout_seconds=3,
            round_max=settings.check_round_max,
        )
        began = time.perf_counter()
        handled = await scheduler.run_round()
        return time.perf_counter() - began, handled
    finally:
        store.close()


def bench(store: str, pending: int, due: int) -> tuple[float, int, float]:
    schema = None
    if store == "sqlite":
        url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'checks.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        url = f"{PG_BASE}?options=-csearch_path%3D{schema}"
    try:
        migrate.upgrade(url)
        began = time.perf_counter()
        fill(url, pending, due)
        filled = time.perf_counter() - began
        seconds, handled = asyncio.run(one_round(url))
        return seconds, handled, filled
    finally:
        if schema is not None:
            with admin.connect() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", default="10000,1000000")
    parser.add_argument("--due", type=int, default=1000)
    parser.add_argument("--stores", default="sqlite,postgresql")
    args = parser.parse_args()
    counts = [int(n) for n in args.pending.split(",")]
    for store in args.stores.split(","):
        print(f"\n== {store}: one check round over {args.due} due halves")
        print(f"{'pending':>10}{'round ms':>10}{'handled':>9}{'x smallest':>12}{'fill s':>8}")
        base = None
        for pending in counts:
            seconds, handled, filled = bench(store, pending, args.due)
            base = base or seconds
            print(
                f"{pending:>10,}{seconds * 1000:>10.0f}{handled:>9}{seconds / base:>12.2f}"
                f"{filled:>8.0f}"
            )


if __name__ == "__main__":
    main()
