"""A fault run of check-back delivery: 120 mixed transactions, a producer that restarts, a broker
SIGKILL half-way -- and the outcome counts (not a speed benchmark: it prints what became of each).

    python bench/check_delivery_run.py [--transactions 120] [--store sqlite|postgresql]

In the spirit of RocketMQ's ``TransactionalMsgIT``: each transaction's local outcome is one of
five kinds, and the producer answers checks from its own record of them:

* ``commit`` / ``rollback``: the producer sends its decision itself;
* ``silent-commit`` / ``silent-rollback``: it never does (a crash after the local transaction):
  only a check can resolve it;
* ``unknown-then-commit``: its first check answers UNKNOWN, the next COMMIT.

The producer is a plain ``ThreadingHTTPServer`` (listen backlog 5) that heartbeats its callback URL
from the start but only listens after ``--producer-late`` seconds (a rolling restart), and the
broker is SIGKILLed once half the halves are sent, then started again on the same store.  At the
end every transaction must be in the state its kind implies, none DISCARDED, none resolved twice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
KINDS = ("commit", "rollback", "silent-commit", "silent-rollback", "unknown-then-commit")
EXPECTED = {
    "commit": "COMMITTED",
    "rollback": "ROLLED_BACK",
    "silent-commit": "COMMITTED",
    "silent-rollback": "ROLLED_BACK",
    "unknown-then-commit": "COMMITTED",
}
BROKER_FLAGS = (
    "--transaction-timeout-seconds", "1",
    "--transaction-check-interval-seconds", "1",
    "--transaction-check-max", "3",
    "--check-timeout-seconds", "2",
    "--check-unreachable-seconds", "2",
    "--producer-expiry-seconds", "30",
)  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    def __init__(self, url: str, port: int, log: Path) -> None:
        self.url, self.port, self.log = url, port, log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "halfmq", "broker", "serve", "--database-url",
                 self.url, "--port", str(self.port), *BROKER_FLAGS],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.http}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit(f"broker not ready: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


class Producer:
    """The local outcomes, the checks received, and the push server that answers them."""

    def __init__(self) -> None:
        self.kind: dict[str, str] = {}  # key -> kind
        self.checks: Counter[str] = Counter()  # key -> checks received
        self.lock = threading.Lock()

    def answer(self, check: dict[str, Any]) -> str:
        key = check["keys"][0]
        with self.lock:
            self.checks[key] += 1
            received = self.checks[key]
        kind = self.kind.get(key)
        if kind == "unknown-then-commit" and received == 1:
            return "UNKNOWN"
        return "ROLLBACK" if kind in (None, "rollback", "silent-rollback") else "COMMIT"

    def serve(self, port: int) -> ThreadingHTTPServer:
        producer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                check = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps({"state": producer.answer(check)}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)  # backlog 5, as the issue found
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def post_until_ok(broker: Broker, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Retry through the broker's restart; the msg_id / decision makes a retry exactly-once."""
    for _ in range(600):
        try:
            response = httpx.post(f"{broker.http}{path}", json=body, timeout=10)
            if response.status_code < 500:
                result: dict[str, Any] = response.json()
                return result
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{path} never answered")


def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="halfmq-delivery-"))
    if args.store == "sqlite":
        url = f"sqlite:///{workdir / 'broker.db'}"
    else:
        url = PG_BASE
        from sqlalchemy import create_engine, text

        schema = f"halfmq_run_{uuid.uuid4().hex[:8]}"
        with create_engine(PG_BASE, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = f"{PG_BASE}?options=-csearch_path%3D{schema}"
        subprocess.run([sys.executable, "-m", "halfmq", "db", "upgrade",
                        "--database-url", url], check=True, capture_output=True)  # fmt: skip
    broker = Broker(url, free_port(), workdir / "broker.log")
    broker.start()
    producer, callback_port = Producer(), free_port()
    heartbeat = {"client_id": "bob-1", "callback_url": f"http://127.0.0.1:{callback_port}/check",
                 "topics": ["transfers"]}  # fmt: skip
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.5):
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(f"{broker.http}/v1/producer-groups/bob/heartbeat", json=heartbeat)

    post_until_ok(broker, "/v1/producer-groups/bob/heartbeat", heartbeat)
    threading.Thread(target=beat, daemon=True).start()
    post_until_ok(broker, "/v1/topics", {"name": "transfers", "queues": 4})
    started = time.monotonic()
    server = None
    sent = threading.Semaphore(0)

    def one(n: int) -> tuple[str, str]:
        key, kind = f"t-{n}", KINDS[n % len(KINDS)]
        producer.kind[key] = kind
        half = post_until_ok(broker, "/v1/transactions", {"topic": "transfers",
                             "producer_group": "bob", "body": key, "keys": [key],
                             "msg_id": f"m-{n}"})  # fmt: skip
        sent.release()
        txid = str(half["transaction_id"])
        if kind in ("commit", "rollback"):
            post_until_ok(broker, f"/v1/transactions/{txid}/{kind}", {"producer_group": "bob"})
        return key, txid

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, n) for n in range(args.transactions)]
        for _ in range(args.transactions // 2):
            sent.acquire()
        broker.kill()  # half-way: SIGKILL, then the same store again
        killed_at = time.monotonic() - started
        broker.start()
        txids = dict(f.result() for f in futures)
    while time.monotonic() - started < 600:
        if server is None and time.monotonic() - started >= args.producer_late:
            server = producer.serve(callback_port)
        listed = httpx.get(f"{broker.http}/v1/transactions",
                           params={"state": "PREPARED", "limit": 1000}).json()  # fmt: skip
        if server is not None and not listed["transactions"]:
            break
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    stop.set()
    states = {key: httpx.get(f"{broker.http}/v1/transactions/{txid}").json()
              for key, txid in txids.items()}  # fmt: skip
    metrics = httpx.get(f"{broker.http}/metrics").text
    broker.stop()
    if server is not None:
        server.shutdown()

    print(f"store {args.store}: {args.transactions} transactions, broker SIGKILL at "
          f"{killed_at:.1f} s, producer listening from {args.producer_late:.0f} s, "
          f"settled after {elapsed:.1f} s")  # fmt: skip
    print(f"{'kind':<22}{'count':>6}  final states")
    wrong = 0
    for kind in KINDS:
        keys = [k for k, v in producer.kind.items() if v == kind]
        finals = Counter(states[k]["state"] for k in keys)
        wrong += sum(n for state, n in finals.items() if state != EXPECTED[kind])
        print(f"{kind:<22}{len(keys):>6}  {dict(finals)}")
    times = Counter(states[k]["check_times"] for k in states)
    by = Counter(states[k]["resolved_by"] for k in states)
    print(f"check_times per transaction: {dict(sorted(times.items()))}")
    print(f"resolved by: {dict(by)}; checks the producer received: {sum(producer.checks.values())}")
    for line in metrics.splitlines():
        if line.startswith("halfmq_checks_total"):
            print("  after the restart:", line)
    discarded = sum(1 for s in states.values() if s["state"] == "DISCARDED")
    print(f"not where they should be: {wrong}; DISCARDED: {discarded}")
    return 1 if wrong or discarded else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=120)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--producer-late", type=float, default=8.0,
                        help="seconds before the producer's check server listens")  # fmt: skip
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
