"""What the ACL costs: sends and transactions with the ACL on against off, in one run.

    python bench/acl_bench.py [--seconds 5] [--rounds 2] [--stores sqlite,postgresql]

For each store it starts a broker without the ACL and one with it (fresh stores, alternating
off/on ``--rounds`` times so that the machine's drift hits both alike) and loads each with the same
keep-alive load generator; with the ACL on every request is signed (HMAC-SHA256 over the canonical
request, a fresh nonce each) by an account with PUB on the topic and the group, so each request
passes the whole gate: signature, nonce remembered in the store, needs (a commit reads its
transaction's group and topic), rate limit.  Prints requests per second and on/off ratios; the
issue's target is at most 10 % slower (ratio >= 0.90).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
from broker_bench import start_broker
from loadgen import Connection, run

from framework.signing import Credentials, HalfmqAuth, sign_headers

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
ACL = """\
accounts:
  - accessKey: bench-producer
    secretKey: bench-producer-secret
    topicPerms: [bench=PUB]
    groupPerms: [bench=PUB]
  - accessKey: bench-admin
    secretKey: bench-admin-secret
    admin: true
"""
PRODUCER = Credentials("bench-producer", "bench-producer-secret")
ADMIN = Credentials("bench-admin", "bench-admin-secret")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def store_url(store: str, workdir: Path) -> str:
    if store == "sqlite":
        return f"sqlite:///{workdir / f'{uuid.uuid4().hex[:8]}.db'}"
    from sqlalchemy import create_engine, text

    schema = f"halfmq_acl_bench_{uuid.uuid4().hex[:8]}"
    with create_engine(PG_BASE, isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    return f"{PG_BASE}?options=-csearch_path%3D{schema}"


def start(url: str, port: int, acl: Path | None, log: Path) -> subprocess.Popen[bytes]:
    return start_broker(url, port, log, extra=["--acl", str(acl)] if acl else [])


def signer(on: bool) -> Callable[[str, str, bytes], dict[str, str]] | None:
    if not on:
        return None

    def sign(method: str, path: str, payload: bytes) -> dict[str, str]:
        return sign_headers(PRODUCER, method, path, "", payload)

    return sign


async def measure(port: int, on: bool, seconds: float) -> dict[str, float]:
    sign = signer(on)

    async def send(conn: Connection, i: int) -> int:
        status, _ = await conn.request("POST", "/v1/topics/bench/messages",
                                       {"body": "hello world", "keys": [f"k{i}"]}, sign)  # fmt: skip
        if status != 201:
            raise ValueError(status)
        return 1

    async def transaction(conn: Connection, i: int) -> int:
        status, data = await conn.request("POST", "/v1/transactions", {"body": "transfer",
                                          "topic": "bench", "producer_group": "bench",
                                          "keys": [f"t{i}"]}, sign)  # fmt: skip
        if status != 201:
            raise ValueError(status)
        txid = orjson.loads(data)["transaction_id"]
        status, _ = await conn.request("POST", f"/v1/transactions/{txid}/commit",
                                       {"producer_group": "bench"}, sign)  # fmt: skip
        if status != 200:
            raise ValueError(status)
        return 1

    auth = HalfmqAuth(ADMIN) if on else None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", auth=auth) as client:
        (await client.post("/v1/topics", json={"name": "bench", "queues": 8})).raise_for_status()
    rates = {}
    for name, operation in (("sends", send), ("transactions", transaction)):
        result = await run(name, "127.0.0.1", port, operation, connections=32, seconds=seconds)
        if result.errors:
            raise RuntimeError(f"{name}: {result.errors} errors")
        rates[name] = result.rate
    return rates


def bench_store(store: str, seconds: float, rounds: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-acl-bench-"))
    acl_file = workdir / "plain_acl.yml"
    acl_file.write_text(ACL)
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(rounds):
        for on in (False, True):
            port = free_port()
            process = start(store_url(store, workdir), port, acl_file if on else None,
                            workdir / f"broker-{port}.log")  # fmt: skip
            try:
                runs[on].append(asyncio.run(measure(port, on, seconds)))
            finally:
                process.terminate()
                process.wait(timeout=30)
    print(f"\n{store}: {rounds} rounds of {seconds:g} s, off/on alternating")
    print(f"{'':<14}{'ACL off (req/s)':>18}{'ACL on (req/s)':>18}{'on / off':>10}")
    for name in ("sends", "transactions"):
        off = statistics.mean(r[name] for r in runs[False])
        on = statistics.mean(r[name] for r in runs[True])
        print(f"{name:<14}{off:>18,.0f}{on:>18,.0f}{on / off:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stores", default="sqlite,postgresql")
    args = parser.parse_args()
    for store in args.stores.split(","):
        bench_store(store, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
