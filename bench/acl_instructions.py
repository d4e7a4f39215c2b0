"""What the ACL costs the broker, counted in instructions rather than seconds: one run.

    python bench/acl_instructions.py [--requests 1600] [--operation send|transaction]

``acl_bench.py`` compares rates, which move by 10-15 % from run to run on a shared two-core
machine.  This script starts a broker (SQLite) under valgrind's callgrind with the ACL off and
then on, sends the same signed (or unsigned) requests from 8 keep-alive connections, and counts
the instructions the whole broker process (event loop and writer thread) executes for them,
instrumentation switched on after a warm-up and off after the last answer.  The count per request
repeats within about 0.5 % between runs, so the on/off ratio shows a change of a few thousand
instructions that a rate cannot.  Needs ``valgrind`` (Debian's package); under it the broker runs
about 30 times slower, so a run takes a minute or two.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from acl_bench import ACL, ADMIN, free_port, signer, store_url
from loadgen import Connection

from framework.signing import HalfmqAuth

CONNECTIONS = 8


def counted(out: Path) -> int:
    """The instructions in callgrind's dumps (the ``totals:`` line of each)."""
    total = 0
    for dump in out.parent.glob(out.name + "*"):
        for line in dump.read_text().splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


# The broker's timers, stretched by callgrind's slowdown (about 30 times): a timer costs the same
# per second whatever the load, so at full speed its share of a request is 30 times smaller than
# under valgrind, and on a loaded machine (a slower run) it grows further.  Stretched, the count is
# the requests' own work, on both sides alike; the ACL's reload (every 2 s) would otherwise be
# charged to the ACL at 30 times its real share.
SLOWDOWN = 30
TIMERS = {
    "HALFMQ_ACL_RELOAD_SECONDS": 2,
    "HALFMQ_BROKER_BEAT_SECONDS": 10,
    "HALFMQ_PURGE_INTERVAL_SECONDS": 60,
    "HALFMQ_TRANSACTION_CHECK_INTERVAL_SECONDS": 30,
}


def start(url: str, port: int, acl: Path | None, out: Path, log: Path) -> subprocess.Popen[bytes]:
    subprocess.run([sys.executable, "-m", "halfmq", "db", "upgrade", "--database-url", url],
                   check=True, capture_output=True)  # fmt: skip
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, "-m", "halfmq", "broker", "serve", "--database-url", url,
        "--port", str(port), "--log-level", "warning",
        *(["--acl", str(acl)] if acl else []),
    ]  # fmt: skip
    env = {**os.environ, **{name: str(seconds * SLOWDOWN) for name, seconds in TIMERS.items()}}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(log.read_text()[-2000:])


def instrument(pid: int, switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(pid)], check=True, capture_output=True)


async def load(port: int, on: bool, operation: str, requests: int, pid: int) -> None:
    auth = HalfmqAuth(ADMIN) if on else None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", auth=auth, timeout=60) as c:
        (await c.post("/v1/topics", json={"name": "bench", "queues": 8})).raise_for_status()
    sign = signer(on)
    conns = [await Connection.open("127.0.0.1", port) for _ in range(CONNECTIONS)]

    async def one(conn: Connection, i: int) -> None:
        if operation == "send":
            body = {"body": "hello world", "keys": [f"k{i}"]}
            status, _ = await conn.request("POST", "/v1/topics/bench/messages", body, sign)
            assert status == 201, status
            return
        half = {"body": "transfer", "topic": "bench", "producer_group": "bench", "keys": [f"t{i}"]}
        status, data = await conn.request("POST", "/v1/transactions", half, sign)
        assert status == 201, status
        txid = orjson.loads(data)["transaction_id"]
        ended = {"producer_group": "bench"}
        status, _ = await conn.request("POST", f"/v1/transactions/{txid}/commit", ended, sign)
        assert status == 200, status

    async def rounds(count: int, first: int) -> None:
        for r in range(count):
            start_at = first + r * CONNECTIONS
            await asyncio.gather(*(one(c, start_at + j) for j, c in enumerate(conns)))

    await rounds(20, 0)  # warm-up, not counted
    await asyncio.to_thread(instrument, pid, "on")
    await rounds(requests // CONNECTIONS, 100_000)
    await asyncio.to_thread(instrument, pid, "off")
    for conn in conns:
        conn.close()


def measure(on: bool, operation: str, requests: int) -> float:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-acl-instr-"))
    acl_file = workdir / "plain_acl.yml"
    acl_file.write_text(ACL)
    port = free_port()
    out = workdir / "callgrind.out"
    process = start(store_url("sqlite", workdir), port, acl_file if on else None, out,
                    workdir / "broker.log")  # fmt: skip
    try:
        asyncio.run(load(port, on, operation, requests, process.pid))
    finally:
        process.terminate()
        process.wait(timeout=120)
    return counted(out) / (requests // CONNECTIONS * CONNECTIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1600)
    parser.add_argument("--operation", choices=("send", "transaction"), default="send")
    parser.add_argument("--only", choices=("off", "on"), help="count one side only (iterating)")
    args = parser.parse_args()
    unit = "send" if args.operation == "send" else "transaction (half + commit)"
    print(f"instructions a {unit}, whole broker process, SQLite")
    off = None if args.only == "on" else measure(False, args.operation, args.requests)
    if off is not None:
        print(f"  ACL off {off:>12,.0f}", flush=True)
    if args.only == "off":
        return
    on = measure(True, args.operation, args.requests)
    if off is None:
        print(f"  ACL on  {on:>12,.0f}")
        return
    print(f"  ACL on  {on:>12,.0f}   (+{on - off:,.0f})")
    print(f"  off / on  {off / on:.3f}   (the rate ratio this predicts when the CPU bounds it)")


if __name__ == "__main__":
    main()
