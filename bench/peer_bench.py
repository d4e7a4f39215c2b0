"""halfmq against what a Python team would pick instead: FastStream + faststream-outbox + RabbitMQ
(issue 33), on the same PostgreSQL and the same business transaction, from one run.

    python bench/peer_bench.py [--seconds 10] [--rounds 3] [--rate 200] [--tasks 32]
    python bench/peer_bench.py --quick        # a smoke run: 3 s windows, one round
    python bench/peer_bench.py --sides halfmq-0 halfmq --modes closed --profile DIR   # py-spy

Needs asyncpg (``pip install 'asyncpg>=0.29'``) and the machine's RabbitMQ on 127.0.0.1:5672.

The business transaction: one of 1,000 accounts updated, a ledger row inserted, a message that
says so; 5 % roll back.  ``--tasks`` asyncio tasks run it in a producer process, closed loop (each
starts the next at once) and paced (``--rate`` a second).  The sides, each as its authors intend:

* ``halfmq``: ``AsyncTransactionProducer`` with ``@producer.transactional`` (the automatic check
  mode: the framework's log row in the same transaction, checks pulled), ``batch_linger_ms`` at
  its default, an ``AsyncPushConsumer`` with its defaults, the broker on PostgreSQL;
* ``halfmq-0``: the same with ``batch_linger_ms=0`` on producer and consumer (no shared requests);
* ``halfmq-oneway``: ``halfmq`` with ``end_oneway=True`` (docs/framework.md, "Ending one way"):
  the commit or rollback sent from the background, ``send_message_in_transaction`` returning once
  the local transaction has;
* ``peer``: ``OutboxBroker.publish(..., session=...)`` in the business transaction, the relay
  (faststream-outbox's subscriber, asyncpg with LISTEN/NOTIFY, 8 workers, fetch batches of 50, the
  batched terminal DELETE) publishing to the machine's RabbitMQ (a durable queue, persistent
  messages, publisher confirms), a FastStream ``RabbitBroker`` consumer.

Each window starts the side's client processes (the halfmq broker runs for the whole bench),
warms up for ``--warmup`` s, then measures ``--seconds``; the sides alternate within each round.
A window's figures: transactions committed (their local commit inside the window) and delivered
(a first handler call inside it) a second; commit -> handler latency (the commit's time from
SQLAlchemy's ``after_commit``, the handler's from the consumer: one machine, one clock); the CPU
of every process of the side (client, broker or relay, consumer, the PostgreSQL backends of the
side's databases by PID, RabbitMQ's beam process) from /proc, per transaction; and, after the
consumer has drained (bounded), the correctness counts against the ledger rows the database
holds: missing, duplicates, rolled back delivered, delivered but never committed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import free_port, start_broker

PG = "postgresql://postgres@127.0.0.1:5432"
AMQP = "amqp://guest:guest@127.0.0.1:5672/"
ROLES = Path(__file__).resolve().parent / "peer" / "roles.py"
TICK = os.sysconf("SC_CLK_TCK")
SIDES = ("halfmq", "halfmq-oneway", "halfmq-0", "peer")
CONSUMER_ROUTES = ("receive", "ack", "ack-and-receive")  # halfmq's consumer, counted
RELAY = {  # faststream-outbox's throughput knobs (its docs: performance, subscriber options)
    "max_workers": 8,
    "fetch_batch_size": 50,
    "min_fetch_interval": 0.1,
    "max_fetch_interval": 1.0,
    "terminal_flush_batch_size": 50,
}
SCHEMA = """
CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT n, 0 FROM generate_series(1, 1000) n;
CREATE TABLE ledger (id text PRIMARY KEY, run text NOT NULL, account integer NOT NULL,
                     amount integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ledger_run ON ledger (run);
"""


# -- processes and their CPU ----------------------------------------------------------------------


def cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def beam_pid() -> int | None:
    """RabbitMQ's Erlang VM (the machine's RabbitMQ: not started or stopped here)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "beam.smp":
                    return int(entry.name)
    return None


def backends(databases: list[str]) -> list[int]:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s)", (databases,)
        ).fetchall()
    return [row[0] for row in rows]


@dataclass
class Cpu:
    """CPU of named processes over a window; PostgreSQL's backends are looked up at both ends
    (a backend opened during the window counts whole)."""

    named: dict[str, list[int]]
    databases: list[str]
    start: dict[int, float] = field(default_factory=dict)

    def read(self) -> dict[int, tuple[str, float]]:
        seen: dict[int, tuple[str, float]] = {}
        for role, pids in [*self.named.items(), ("postgres", backends(self.databases))]:
            for pid in pids:
                cpu = cpu_of(pid)
                if cpu is not None:
                    seen[pid] = (role, cpu)
        return seen

    def begin(self) -> None:
        self.start = {pid: cpu for pid, (_, cpu) in self.read().items()}

    def end(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for pid, (role, cpu) in self.read().items():
            used[role] = used.get(role, 0.0) + cpu - self.start.get(pid, 0.0)
        return used


class Role:
    """A process of ``bench/peer/roles.py``, ready once it printed ``ready``; stopped by PID."""

    def __init__(self, role: str, config: dict[str, Any], folder: Path) -> None:
        self.name = role
        self.log = (folder / f"{role}.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(ROLES), role, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 60) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.process.stdout], [], [], 0.5)
            if readable and self.process.stdout.readline().strip() == b"ready":
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early: see {self.log.name}")
        raise RuntimeError(f"{self.name} not ready in {timeout} s: see {self.log.name}")

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def stop(self, timeout: float = 30) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


# -- databases ------------------------------------------------------------------------------------


@contextlib.contextmanager
def databases(names: list[str]) -> Iterator[None]:
    """Databases of the bench's own on the machine's PostgreSQL, dropped afterwards."""
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def prepare_app(database: str, side: str) -> None:
    """The business tables, and the side's own: halfmq's local-transaction log, the outbox."""
    with psycopg.connect(f"{PG}/{database}", autocommit=True) as conn:
        conn.execute(SCHEMA)
    from sqlalchemy import create_engine

    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}")
    if side == "halfmq":
        from framework.tables import create_tables

        create_tables(engine)
    else:
        from faststream_outbox import make_outbox_table
        from sqlalchemy import MetaData

        metadata = MetaData()
        make_outbox_table(metadata, table_name="outbox")
        metadata.create_all(engine)
    engine.dispose()


def ledger_ids(database: str, run: str) -> set[str]:
    with psycopg.connect(f"{PG}/{database}") as conn:
        rows = conn.execute("SELECT id FROM ledger WHERE run = %s", (run,)).fetchall()
    return {row[0] for row in rows}


# -- one window -----------------------------------------------------------------------------------


@dataclass
class Window:
    side: str
    mode: str
    committed: float  # a second, inside the window
    delivered: float
    cpu: dict[str, float]  # seconds in the window, by role
    latencies: list[float]  # seconds, commit -> first handler call, of the window's commits
    counts: dict[str, int]
    # halfmq: the consumer's requests per message it handled, by route (its whole run)
    requests: dict[str, float] = field(default_factory=dict)
    # halfmq: the latency's two stages, seconds -- commit -> the commit request answered (the
    # producer's linger, the request, the broker's group commit), then -> the first handler call
    # (the broker's wake-up of the long poll, the receive, the consumer's hand-off)
    stages: tuple[list[float], list[float]] = ([], [])

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())


@dataclass
class Bench:
    args: argparse.Namespace
    folder: Path
    broker: str = ""
    broker_pid: int = 0
    dbs: dict[str, str] = field(default_factory=dict)

    def run_window(self, side: str, mode: str, tag: str) -> Window:
        a, folder = self.args, self.folder
        run = f"{side}-{mode}-{tag}-{uuid.uuid4().hex[:6]}"
        files = {k: str(folder / f"{run}.{k}") for k in ("producer", "consumer", "progress")}
        app = self.dbs["halfmq" if side.startswith("halfmq") else "peer"]
        load = {
            "app_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{app}",
            "tasks": a.tasks,
            "rate": a.rate if mode == "paced" else 0,
            "rollback": 0.05,
            "run": run,
            "out": files["producer"],
        }
        consumer_out = {"out": files["consumer"], "progress": files["progress"]}
        roles: list[Role] = []
        try:
            if side.startswith("halfmq"):
                topic, linger = f"pb-{run}", (0.0 if side == "halfmq-0" else a.linger_ms)
                httpx.post(
                    f"{self.broker}/v1/topics", json={"name": topic, "queues": 8}
                ).raise_for_status()
                common = {"broker": self.broker, "topic": topic, "linger_ms": linger}
                consumer = Role(
                    "hmq-consumer", {**common, **consumer_out, "group": f"g-{run}"}, folder
                )
                roles.append(consumer)
                consumer.wait_ready()
                oneway = {"end_oneway": side == "halfmq-oneway"}
                producer = Role("hmq-producer", {**common, **load, **oneway}, folder)
                named = {"broker": [self.broker_pid]}
                databases = [app, self.dbs["broker"]]
            else:
                common = {"amqp": AMQP, "rabbit_queue": f"pb-{run}", "outbox_queue": f"ob-{run}"}
                consumer = Role("peer-consumer", {**common, **consumer_out}, folder)
                roles.append(consumer)
                consumer.wait_ready()
                relay = Role(
                    "peer-relay", {**common, "app_url": load["app_url"], "relay": RELAY}, folder
                )
                roles.append(relay)
                relay.wait_ready()
                producer = Role("peer-producer", {**common, **load}, folder)
                beam = beam_pid()
                named = {"relay": [relay.pid], "rabbitmq": [beam] if beam else []}
                databases = [app]
            roles.append(producer)
            producer.wait_ready()
            named = {"client": [producer.pid], "consumer": [consumer.pid], **named}
            cpu = Cpu(named, databases)
            t0 = time.time() + a.warmup
            t1 = t0 + a.seconds
            producer.send(f"{t0} {t1}")
            time.sleep(max(0.0, t0 - time.time()))
            cpu.begin()
            spies = self.profile(run, named, a.seconds)
            time.sleep(max(0.0, t1 - time.time()))
            used = cpu.end()
            for spy in spies:
                spy.wait(60)
            producer.process.wait(120)
            outcome = json.loads(Path(files["producer"]).read_text())
            truth = ledger_ids(app, run)
            self.drain(files["progress"], len(truth), a.drain)
            consumer.stop()
            seen: dict[str, list[float]] = json.loads(Path(files["consumer"]).read_text())
            made = Path(files["consumer"] + ".requests")
            requests = json.loads(made.read_text()) if made.exists() else {}
        finally:
            for role in reversed(roles):
                role.stop()
        window = summarize(side, mode, t0, t1, used, outcome, seen, truth)
        handled = max(1, sum(len(times) for times in seen.values()))
        window.requests = {k: v / handled for k, v in requests.items() if k in CONSUMER_ROUTES}
        return window

    def profile(
        self, run: str, named: dict[str, list[int]], seconds: float
    ) -> list[subprocess.Popen[bytes]]:
        """With ``--profile DIR``: py-spy records the client, the broker or relay and the
        consumer over the measured window (collapsed stacks, one file each, all threads)."""
        if not self.args.profile:
            return []
        folder = Path(self.args.profile)
        folder.mkdir(parents=True, exist_ok=True)
        spy = Path(sys.executable).parent / "py-spy"
        return [
            subprocess.Popen(
                [str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                 "--rate", "100", "--format", "raw", "--threads", "--idle", "--nonblocking",
                 "-o", str(folder / f"{run}.{role}.txt")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for role in ("client", "broker", "relay", "consumer")
            for pid in named.get(role, [])
        ]  # fmt: skip

    @staticmethod
    def drain(progress: str, expected: int, limit: float) -> None:
        """Wait (at most ``limit`` s) until the consumer has handled ``expected`` distinct ids."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, ValueError):
                if int(Path(progress).read_text().strip() or 0) >= expected:
                    return
            time.sleep(0.1)


def summarize(
    side: str,
    mode: str,
    t0: float,
    t1: float,
    cpu: dict[str, float],
    outcome: dict[str, Any],
    seen: dict[str, list[float]],
    truth: set[str],
) -> Window:
    commits: dict[str, float] = outcome["commits"]
    rolled_back = set(outcome["rolled_back"])
    seconds = t1 - t0
    in_window = [i for i, ts in commits.items() if t0 <= ts < t1]
    delivered = sum(1 for times in seen.values() if t0 <= min(times) < t1)
    latencies = [min(seen[i]) - commits[i] for i in in_window if i in seen]
    decided: dict[str, float] = outcome.get("decided", {})
    both = [i for i in in_window if i in seen and i in decided]
    stages = (
        [decided[i] - commits[i] for i in both],
        [min(seen[i]) - decided[i] for i in both],
    )
    counts = {
        "committed": len(truth),
        "missing": len(truth - seen.keys()),
        "duplicates": sum(len(times) - 1 for times in seen.values()),
        "rolled back delivered": len(rolled_back & seen.keys()),
        "delivered, never committed": len(seen.keys() - truth),
        "rolled back, yet committed": len(rolled_back & truth),
        "errors": len(outcome["errors"]),
    }
    if outcome["errors"]:
        print(f"    first error: {outcome['errors'][0]}", flush=True)
    window = Window(
        side, mode, len(in_window) / seconds, delivered / seconds, cpu, latencies, counts
    )
    window.stages = stages
    return window


# -- report ---------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def window_line(w: Window, seconds: float) -> str:
    n = max(1.0, w.committed * seconds)
    split = ", ".join(f"{k} {v / n * 1e3:.2f}" for k, v in sorted(w.cpu.items()))
    bad = {k: v for k, v in w.counts.items() if v and k != "committed"}
    requests = ", ".join(f"{k} {w.requests.get(k, 0.0):.3f}" for k in CONSUMER_ROUTES)
    return (
        f"  {w.side:<9}{w.mode:<7} committed {w.committed:7.1f}/s delivered {w.delivered:7.1f}/s"
        f"  CPU/tx {w.cpu_total / n * 1e3:6.2f} ms ({split})"
        f"  p50/p99 {pct(w.latencies, 0.5) * 1e3:7.1f}/{pct(w.latencies, 0.99) * 1e3:7.1f} ms"
        f"  {bad if bad else 'all correct'}"
        + (f"  consumer requests/message: {requests}" if w.requests else "")
        + (f"  stages p50/p99 ms: commit->decided {stage(w.stages[0])}, decided->handler "
           f"{stage(w.stages[1])}" if w.stages[0] else "")
    )  # fmt: skip


def stage(values: list[float]) -> str:
    return f"{pct(values, 0.5) * 1e3:.1f}/{pct(values, 0.99) * 1e3:.1f}"


@dataclass
class Medians:
    committed: float
    delivered: float
    cpu_per_committed: float
    cpu_per_delivered: float
    p50: float
    p99: float
    split: dict[str, float]


def medians(windows: list[Window], seconds: float) -> Medians:
    def med(f: Any) -> float:
        return statistics.median(f(w) for w in windows)

    roles = sorted({k for w in windows for k in w.cpu})
    per_tx = [lambda w, r=r: w.cpu.get(r, 0.0) / max(1.0, w.committed * seconds) for r in roles]
    return Medians(
        med(lambda w: w.committed),
        med(lambda w: w.delivered),
        med(lambda w: w.cpu_total / max(1.0, w.committed * seconds)),
        med(lambda w: w.cpu_total / max(1.0, w.delivered * seconds)),
        med(lambda w: pct(w.latencies, 0.5)),
        med(lambda w: pct(w.latencies, 0.99)),
        {r: med(f) for r, f in zip(roles, per_tx, strict=True)},
    )


def compare(m: dict[tuple[str, str], Medians], h: str, args: argparse.Namespace) -> None:
    """The issue's table: halfmq side ``h`` against the peer."""
    p = "peer"
    hc, pc, hp, pp = m[h, "closed"], m[p, "closed"], m[h, "paced"], m[p, "paced"]
    rows = [
        ("transactions committed / s, closed loop", hc.committed, pc.committed, "{:,.0f}"),
        ("delivered end to end / s, closed loop", hc.delivered, pc.delivered, "{:,.0f}"),
        ("CPU per committed tx, closed loop (ms)", hc.cpu_per_committed * 1e3,
         pc.cpu_per_committed * 1e3, "{:.2f}"),
        ("CPU per delivered tx, closed loop (ms)", hc.cpu_per_delivered * 1e3,
         pc.cpu_per_delivered * 1e3, "{:.2f}"),
        ("commit -> handler p50, closed (ms)", hc.p50 * 1e3, pc.p50 * 1e3, "{:.1f}"),
        ("commit -> handler p99, closed (ms)", hc.p99 * 1e3, pc.p99 * 1e3, "{:.1f}"),
        (f"paced {args.rate:g}/s: committed / s", hp.committed, pp.committed, "{:,.0f}"),
        (f"paced {args.rate:g}/s: p50 (ms)", hp.p50 * 1e3, pp.p50 * 1e3, "{:.1f}"),
        (f"paced {args.rate:g}/s: p99 (ms)", hp.p99 * 1e3, pp.p99 * 1e3, "{:.1f}"),
        (f"paced {args.rate:g}/s: CPU per committed tx (ms)", hp.cpu_per_committed * 1e3,
         pp.cpu_per_committed * 1e3, "{:.2f}"),
        (f"paced {args.rate:g}/s: CPU per delivered tx (ms)", hp.cpu_per_delivered * 1e3,
         pp.cpu_per_delivered * 1e3, "{:.2f}"),
    ]  # fmt: skip
    print(f"\n| figure (median of {args.rounds}) | {h} | peer | {h} / peer |")
    print("|---|---|---|---|")
    for name, hv, pv, fmt in rows:
        print(f"| {name} | {fmt.format(hv)} | {fmt.format(pv)} | {hv / pv:.2f} |")


def report(windows: list[Window], args: argparse.Namespace) -> None:
    s = args.seconds
    m = {
        (side, mode): medians([w for w in windows if w.side == side and w.mode == mode], s)
        for side in args.sides
        for mode in ("closed", "paced")
    }
    print(f"\nmedians of {args.rounds} round(s), {s:g} s windows (load {load_average()}):")
    for (side, mode), x in m.items():
        split = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in x.split.items())
        print(f"  {side:<9}{mode:<7} CPU/tx by process (ms): {split}")
    for side in ("halfmq", "halfmq-oneway"):
        if side in args.sides and "peer" in args.sides:
            compare(m, side, args)
    if {"halfmq", "halfmq-0"} <= set(args.sides):
        hc, zc, zp = m["halfmq", "closed"], m["halfmq-0", "closed"], m["halfmq-0", "paced"]
        print(
            f"\nhalfmq with batch_linger_ms=0: closed {zc.committed:,.0f} tx/s, "
            f"{zc.cpu_per_committed * 1e3:.2f} ms CPU/tx, p50/p99 {zc.p50 * 1e3:.1f}/"
            f"{zc.p99 * 1e3:.1f} ms; paced {zp.committed:,.0f} tx/s, "
            f"{zp.cpu_per_committed * 1e3:.2f} ms CPU/tx, p50/p99 {zp.p50 * 1e3:.1f}/"
            f"{zp.p99 * 1e3:.1f} ms; without / with batching, closed: "
            f"{zc.committed / hc.committed:.2f}"
        )
    totals: dict[str, dict[str, int]] = {}
    for w in windows:
        for k, v in w.counts.items():
            totals.setdefault(w.side, {}).setdefault(k, 0)
            totals[w.side][k] += v
    print("\ncorrectness, all windows (warm-up included):")
    for side, counts in totals.items():
        print(f"  {side:<9}" + ", ".join(f"{k} {v:,}" for k, v in counts.items()))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10, help="measured window")
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--rate", type=float, default=200, help="paced transactions / s")
    parser.add_argument("--linger-ms", type=float, default=2.0, help="halfmq's default")
    parser.add_argument("--drain", type=float, default=30, help="seconds to wait for delivery")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument(
        "--modes", nargs="+", choices=["closed", "paced"], default=["closed", "paced"]
    )
    parser.add_argument("--profile", help="a folder: py-spy records each window's processes")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 s, one round")
    args = parser.parse_args()
    if importlib.util.find_spec("asyncpg") is None:
        sys.exit(
            "peer_bench needs asyncpg (the business transaction's driver on both sides, and "
            "faststream-outbox's LISTEN/NOTIFY): pip install 'asyncpg>=0.29'"
        )
    if args.quick:
        args.seconds, args.rounds, args.warmup = 3.0, 1, 1.0
    suffix = uuid.uuid4().hex[:6]
    dbs = {k: f"peer_bench_{k}_{suffix}" for k in ("halfmq", "broker", "peer")}
    folder = Path(tempfile.mkdtemp(prefix="halfmq-peer-bench-"))
    print(f"{args.tasks} tasks, {args.seconds:g} s windows after {args.warmup:g} s warm-up, "
          f"{args.rounds} round(s), paced at {args.rate:g}/s; logs in {folder}")  # fmt: skip
    print(f"load average at start: {load_average()}", flush=True)
    with databases(list(dbs.values())):
        prepare_app(dbs["halfmq"], "halfmq")
        prepare_app(dbs["peer"], "peer")
        store = f"postgresql+psycopg://postgres@127.0.0.1:5432/{dbs['broker']}"
        port = free_port()
        broker = start_broker(store, port, folder / "broker.log")
        bench = Bench(args, folder, f"http://127.0.0.1:{port}", broker.pid, dbs)
        windows: list[Window] = []
        try:
            for number in range(1, args.rounds + 1):
                print(f"round {number} (load {load_average()}):", flush=True)
                for mode in args.modes:
                    for side in args.sides:
                        w = bench.run_window(side, mode, f"r{number}")
                        windows.append(w)
                        print(window_line(w, args.seconds), flush=True)
        finally:
            broker.terminate()
            broker.wait(30)
    if {"closed", "paced"} <= set(args.modes):
        report(windows, args)


if __name__ == "__main__":
    main()
