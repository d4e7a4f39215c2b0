"""Brokers 1 -> 2 -> 3 on one PostgreSQL: transactions/s and checks/s through the framework's
producers and their broker list, and one of three brokers SIGKILLed under check load.

    python bench/brokers_bench.py [--brokers 1,2,3] [--seconds 10] [--threads 12] [--producers 6]
                                  [--linger-ms MS] [--halves 2000] [--kill-halves 1500]

For each broker count, on a fresh schema of the machine's PostgreSQL (``HALFMQ_BENCH_PG``,
default 127.0.0.1:5432/test), the brokers run as real processes (``b0``, ``b1``, ...):

1. **transactions/s** -- ``--threads`` threads send in transaction (a half, a local COMMIT, a
   commit) through ``--producers`` framework producers, each given the broker list rotated so that
   producer n starts on broker n mod N (a client sticks to the first broker that answers): the load
   spreads over the brokers and each producer still fails over.  The clients are the same whatever
   N; a producer gathers its threads' halves and decisions into shared requests
   (``batch_linger_ms``, the framework's default unless ``--linger-ms``).  Counted: the
   transactions acknowledged COMMITTED in ``--seconds`` after a 2 s warm-up.
2. **checks/s** -- ``--halves`` halves are sent with a local UNKNOW (by the check endpoint's own
   producer) and left not yet due (transaction time-out 1 h); one UPDATE of ``next_check_at`` then
   makes them all due at once (the bench's shortcut, so that the checks are measured alone), and
   every broker's check-back scheduler claims them and pushes checks to the producer's built-in
   check server (``framework.checkserver``), which answers COMMIT or ROLLBACK from the body.
   checks/s = halves / (last resolution - first check's start), from the store's records.

Correctness counts come from the store's records (``drills.brokers.audit``): *resolved
twice* (more than one op record, or a wrong number of real messages), *checked at once* (two
``CHECKED`` spans of one half overlap: two brokers held its claim together), *checked again* (two
checks answered a decision), *wrong*, *unresolved*; and *at once* from the check endpoint's own
log too.

Then **the kill**: three brokers drain ``--kill-halves`` due halves; once a quarter are resolved
and ``b0`` holds claims, ``b0`` is SIGKILLed.  Its claims expire after the check interval plus twice
the check time-out (here 1 + 2 x 2 = 5 s) and the other two finish its work; printed: how many
claims it left, the time from the kill to the last resolution, when its halves were finished
relative to their claims' expiry, and the same counts.

The machine's cores are shared by the brokers, PostgreSQL, the load and whatever else runs: the
bench prints the cores each used in the measured windows and the load average at start and end.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select, text, update

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_service.store import migrate
from broker_service.store.schema import transactions
from drills.brokers import (
    TOPIC,
    Audit,
    CheckEndpoint,
    CheckTimes,
    Fleet,
    audit,
    claims_of,
    endpoint_overlaps,
    postgres_cpu_seconds,
)
from framework import LocalTransactionState, Message, TransactionProducer
from framework.config import CheckMode
from framework.errors import HalfMQError

PG_BASE = os.environ.get("HALFMQ_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# Halves are due only when the bench says so; claims expire 1 + 2 x 2 = 5 s after they are made.
TIMES = CheckTimes(interval=1.0, timeout=2.0, transaction_timeout=3600)
LOAD_GROUP = "many-load"
WARM_UP = 2.0


# -- where it runs --------------------------------------------------------------------------------


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new, migrated schema of the bench's database, as a URL; dropped afterwards."""
    schema = f"bench_many_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{PG_BASE}?options=-csearch_path%3D{schema}"
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def running(url: str, count: int, workdir: Path) -> Iterator[Fleet]:
    fleet = Fleet(url, count, workdir, TIMES)
    try:
        fleet.start()
        answer = httpx.post(f"{fleet.urls[0]}/v1/topics", json={"name": TOPIC, "queues": 4})
        answer.raise_for_status()
        yield fleet
    finally:
        fleet.stop()


@dataclass(frozen=True, slots=True)
class Cores:
    """Cores used over a window: the brokers (all of them), this process (the load and the check
    endpoint) and PostgreSQL (the whole server, whoever else uses it)."""

    brokers: float
    client: float
    postgres: float

    def __str__(self) -> str:
        total = self.brokers + self.client + self.postgres
        return f"{self.brokers:.2f} / {self.client:.2f} / {self.postgres:.2f} = {total:.2f}"


class CpuWindow:
    """CPU seconds of each party from the start of a window, as cores when it ends."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.began = time.monotonic()
        self.start = self._read()

    def _read(self) -> tuple[float, float, float]:
        own = os.times()
        brokers = sum(broker.cpu_seconds() for broker in self.fleet.brokers)
        return brokers, own.user + own.system, postgres_cpu_seconds()

    def cores(self) -> Cores:
        seconds = time.monotonic() - self.began
        end = self._read()
        used = [(b - a) / seconds for a, b in zip(self.start, end, strict=True)]
        return Cores(*used)


def answered_checks(fleet: Fleet) -> list[float]:
    """Each live broker's count of push checks answered (``/metrics``); 0 for a dead one."""
    counts = []
    for broker in fleet.brokers:
        if not broker.alive:
            counts.append(0.0)
            continue
        body = httpx.get(f"{broker.url}/metrics", timeout=10).text
        found = re.search(r'^halfmq_checks_total\{outcome="answered"\} (\S+)$', body, re.M)
        counts.append(float(found.group(1)) if found else 0.0)
    return counts


@dataclass(frozen=True, slots=True)
class Work:
    """What the brokers did, summed over the live ones (``/metrics``): HTTP requests answered,
    group commits of their writers, and units of work those commits carried."""

    requests: float = 0.0
    commits: float = 0.0
    units: float = 0.0

    def __sub__(self, other: Work) -> Work:
        return Work(
            self.requests - other.requests, self.commits - other.commits, self.units - other.units
        )


def work_done(fleet: Fleet) -> Work:
    requests = commits = units = 0.0
    for broker in fleet.brokers:
        if not broker.alive:
            continue
        for line in httpx.get(f"{broker.url}/metrics", timeout=10).text.splitlines():
            if line.startswith("halfmq_request_seconds_count{"):
                requests += float(line.rsplit(" ", 1)[1])
            elif line.startswith("halfmq_store_commits "):
                commits += float(line.rsplit(" ", 1)[1])
            elif line.startswith("halfmq_store_units "):
                units += float(line.rsplit(" ", 1)[1])
    return Work(requests, commits, units)


# -- 1. transactions/s ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxRate:
    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    cores: Cores
    work: Work  # in the measured window
    count: int

    @property
    def per_transaction(self) -> str:
        """HTTP requests and group commits per transaction, units per commit."""
        w, n = self.work, max(self.count, 1)
        units = w.units / w.commits if w.commits else float("nan")
        return f"{w.requests / n:.2f} / {w.commits / n:.2f} / {units:.1f}"


def load_producer(
    brokers: list[str], client_id: str, linger_ms: float | None
) -> TransactionProducer:
    """A producer of the load (no checks); ``linger_ms`` None: the framework's default."""
    if linger_ms is None:
        return TransactionProducer(
            LOAD_GROUP, brokers=brokers, client_id=client_id, check=CheckMode.none()
        )
    return TransactionProducer(
        LOAD_GROUP,
        brokers=brokers,
        client_id=client_id,
        check=CheckMode.none(),
        batch_linger_ms=linger_ms,
    )


def transactions_rate(
    fleet: Fleet, threads: int, producers_count: int, seconds: float, linger_ms: float | None
) -> TxRate:
    """Transactions (half + commit) acknowledged a second, from ``threads`` threads over
    ``producers_count`` producers -- the same clients whatever the number of brokers, so that only
    the brokers change (a producer gathers its threads' calls into shared requests) -- producer
    ``n`` starting on broker ``n mod brokers``."""
    producers = [
        load_producer(fleet.rotated(n % len(fleet.brokers)), f"load-{n}", linger_ms)
        for n in range(producers_count)
    ]
    for producer in producers:
        producer.execute_local_transaction(TOPIC)(
            lambda message, arg: LocalTransactionState.COMMIT_MESSAGE
        )
        producer.start()
    done: list[tuple[float, float]] = []  # (when acknowledged, seconds it took)
    errors = [0]
    stop = threading.Event()

    def work(producer: TransactionProducer) -> None:
        while not stop.is_set():
            began = time.monotonic()
            try:
                result = producer.send_message_in_transaction(Message(TOPIC, body="tx"))
            except HalfMQError:
                errors[0] += 1
                continue
            if result.resolution == "COMMITTED":
                now = time.monotonic()
                done.append((now, now - began))
            else:
                errors[0] += 1

    workers = [
        threading.Thread(target=work, args=(producers[n % len(producers)],), daemon=True)
        for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    try:
        time.sleep(WARM_UP)
        # The window is from before the first scrape to after the second, so that the
        # requests and commits counted are those of the transactions counted.
        mark = time.monotonic()
        done_before = work_done(fleet)
        window = CpuWindow(fleet)
        time.sleep(seconds)
        cores = window.cores()
        in_window = work_done(fleet) - done_before
        end = time.monotonic()
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
        for producer in producers:
            producer.shutdown()
    latencies = sorted(took for at, took in done if mark <= at < end)
    count = len(latencies)
    p50 = latencies[count // 2] * 1000 if count else float("nan")
    p99 = latencies[min(count - 1, int(count * 0.99))] * 1000 if count else float("nan")
    return TxRate(count / (end - mark), p50, p99, errors[0], cores, in_window, count)


# -- 2. checks/s ----------------------------------------------------------------------------------


def fill(endpoint: CheckEndpoint, halves: int, threads: int = 8) -> list[str]:
    """``halves`` halves left to the check-back (not yet due), sent from ``threads`` threads."""
    sent: list[str] = []
    numbers = iter(range(halves))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                n = next(numbers, None)
            if n is None:
                return
            sent.append(endpoint.send_unknown(n))

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    return sent


def make_due(url: str) -> None:
    """Every PREPARED half due now: the brokers' next rounds (within an interval) claim them."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(transactions)
                .where(transactions.c.state == "PREPARED")
                .values(next_check_at=int(time.time() * 1000))
            )
    finally:
        engine.dispose()


def resolved_count(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(func.count()).where(
                transactions.c.state.in_(("COMMITTED", "ROLLED_BACK")),
                transactions.c.resolved_by == "check",
            )
            return int(conn.execute(query).scalar_one())
    finally:
        engine.dispose()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@dataclass(frozen=True, slots=True)
class CheckRun:
    rate: float
    audit: Audit
    at_once_endpoint: int
    per_broker: list[float]
    cores: Cores


def check_rate(fleet: Fleet, url: str, halves: int) -> CheckRun:
    """Fill, make due at once, and time every broker's check-back draining them."""
    endpoint = CheckEndpoint(fleet.urls)
    endpoint.start()
    try:
        sent = fill(endpoint, halves)
        before = answered_checks(fleet)
        window = CpuWindow(fleet)
        make_due(url)
        wait_for(lambda: resolved_count(url) >= len(sent), 600, "every half checked")
        cores = window.cores()
        after = answered_checks(fleet)
        calls = endpoint.snapshot()
    finally:
        endpoint.shutdown()
    result = audit(url, sent)
    at_once, _again = endpoint_overlaps(calls)
    assert result.first_check_ms is not None
    assert result.last_resolved_ms is not None
    seconds = (result.last_resolved_ms - result.first_check_ms) / 1000
    per_broker = [b - a for a, b in zip(before, after, strict=True)]
    return CheckRun(len(sent) / seconds, result, len(at_once), per_broker, cores)


# -- 3. one broker killed -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KillRun:
    halves: int
    resolved_at_kill: int
    orphans: int
    finish_seconds: float  # the kill to the last resolution
    orphans_after_expiry: tuple[float, float]  # min, max seconds past their claim's expiry
    rate_before: float
    rate_after: float
    audit: Audit
    at_once_endpoint: int
    again_endpoint: int
    again_not_orphan: int


def kill_run(fleet: Fleet, url: str, halves: int) -> KillRun:
    """Three brokers drain due halves; ``b0`` is SIGKILLed holding claims; the rest finish."""
    victim = fleet.brokers[0]
    endpoint = CheckEndpoint(fleet.urls)
    endpoint.start()
    try:
        sent = fill(endpoint, halves)
        make_due(url)
        due_at = time.time()
        wait_for(lambda: resolved_count(url) >= halves // 4, 600, "a quarter resolved")
        wait_for(lambda: bool(claims_of(url, victim.broker_id)), 60, "b0 holding claims")
        victim.kill()
        killed = time.time()
        resolved_at_kill = resolved_count(url)
        orphans = claims_of(url, victim.broker_id)
        wait_for(lambda: resolved_count(url) >= len(sent), 600, "every half checked")
        calls = endpoint.snapshot()
    finally:
        endpoint.shutdown()
    result = audit(url, sent)
    at_once, again = endpoint_overlaps(calls)
    assert result.last_resolved_ms is not None
    past = [(result.resolved_at[txid] - until) / 1000 for txid, until in orphans.items()]
    after = len(sent) - resolved_at_kill
    finish = result.last_resolved_ms / 1000 - killed
    return KillRun(
        halves=len(sent),
        resolved_at_kill=resolved_at_kill,
        orphans=len(orphans),
        finish_seconds=finish,
        orphans_after_expiry=(min(past), max(past)) if past else (float("nan"), float("nan")),
        rate_before=resolved_at_kill / (killed - due_at),
        rate_after=after / finish,
        audit=result,
        at_once_endpoint=len(at_once),
        again_endpoint=len(again),
        again_not_orphan=len(set(again) - orphans.keys()),
    )


# -- the report -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    brokers: int
    idle: Cores
    tx: TxRate
    checks: CheckRun


def idle_cores(fleet: Fleet, seconds: float = 3.0) -> Cores:
    """What the brokers use doing nothing asked of them (their schedulers' rounds, beats)."""
    window = CpuWindow(fleet)
    time.sleep(seconds)
    return window.cores()


def rates_table(rows: Sequence[Row]) -> None:
    """Rates, each as a ratio to one broker's (the first row if no row has one broker), and
    the brokers' CPU per operation: on a machine whose cores are all busy anyway, that (not the
    rate) says what one more broker costs."""
    base = next((r for r in rows if r.brokers == 1), rows[0])
    print(
        "| brokers | idle cores of the brokers | transactions/s | x 1 | p50 / p99 ms "
        "| broker CPU ms / transaction | requests / commits per transaction, units per commit "
        "| checks/s | x 1 | checks per broker "
        "| broker CPU ms / check | cores, transactions | cores, checks |"
    )
    print("|---" * 13 + "|")
    for r in rows:
        tx, checks = r.tx, r.checks
        per_broker = " / ".join(f"{n:.0f}" for n in checks.per_broker)
        print(
            f"| {r.brokers} | {r.idle.brokers:.2f} | {tx.rate:.0f} | {tx.rate / base.tx.rate:.2f} "
            f"| {tx.p50_ms:.0f} / {tx.p99_ms:.0f} | {tx.cores.brokers / tx.rate * 1000:.1f} "
            f"| {tx.per_transaction} "
            f"| {checks.rate:.0f} | {checks.rate / base.checks.rate:.2f} | {per_broker} "
            f"| {checks.cores.brokers / checks.rate * 1000:.1f} | {tx.cores} | {checks.cores} |"
        )
    print(
        "cores: the brokers / this process (the load, the check endpoint) / PostgreSQL (the "
        "whole server, whoever uses it) = total"
    )


def counts_table(rows: Sequence[Row], halves: int) -> None:
    print(
        "| brokers | halves checked | resolved twice | checked at once (store / endpoint) "
        "| checked again | wrong | unresolved |"
    )
    print("|---" * 7 + "|")
    for r in rows:
        print(f"| {r.brokers} | {halves} | {counts(r.checks.audit, r.checks.at_once_endpoint)} |")


def counts(result: Audit, at_once_endpoint: int) -> str:
    return (
        f"{len(result.resolved_twice)} | {len(result.checked_at_once)} / {at_once_endpoint} "
        f"| {len(result.checked_again)} | {len(result.wrong)} | {len(result.unresolved)}"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="1,2,3")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=12)
    parser.add_argument(
        "--producers", type=int, default=6, help="framework producers the threads share"
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        help="the producers' batch_linger_ms (default: the framework's; 0: a request per call)",
    )
    parser.add_argument("--halves", type=int, default=2000)
    parser.add_argument("--kill-halves", type=int, default=1500)
    parser.add_argument("--no-kill", action="store_true")
    args = parser.parse_args()
    counts_of = [int(n) for n in args.brokers.split(",")]

    print(f"load average at start: {load_average()}  ({os.cpu_count()} cores)")
    print(
        f"check interval {TIMES.interval:g} s, check time-out {TIMES.timeout:g} s: "
        f"claims expire after {TIMES.claim_expiry:g} s"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="halfmq-brokers-") as scratch:
        for count in counts_of:
            with fresh_schema() as url, running(url, count, Path(scratch)) as fleet:
                idle = idle_cores(fleet)
                tx = transactions_rate(
                    fleet, args.threads, args.producers, args.seconds, args.linger_ms
                )
                checks = check_rate(fleet, url, args.halves)
            rows.append(Row(count, idle, tx, checks))
            print(
                f"{count} broker(s): {tx.rate:.0f} transactions/s, {checks.rate:.0f} checks/s "
                f"(load average {load_average()})",
                flush=True,
            )
        killed = None
        if not args.no_kill:
            with fresh_schema() as url, running(url, 3, Path(scratch)) as fleet:
                killed = kill_run(fleet, url, args.kill_halves)

    print(
        f"\n{args.threads} threads over {args.producers} producers (batch_linger_ms "
        f"{'default' if args.linger_ms is None else f'{args.linger_ms:g}'}); "
        f"{args.halves} halves checked"
    )
    rates_table(rows)
    print()
    counts_table(rows, args.halves)
    bad = sum(not row.checks.audit.ok or row.checks.at_once_endpoint for row in rows)
    if killed is not None:
        k = killed
        low, high = k.orphans_after_expiry
        print(
            f"\nkill: 3 brokers, {k.halves} halves due at once; b0 SIGKILLed with "
            f"{k.resolved_at_kill} resolved and {k.halves - k.resolved_at_kill} left, "
            f"holding {k.orphans} claims"
        )
        print(
            f"  the kill to the last resolution: {k.finish_seconds:.1f} s "
            f"(claims expire after {TIMES.claim_expiry:g} s)"
        )
        print(
            f"  b0's claimed halves resolved {low:.1f}-{high:.1f} s after their claims expired "
            "(due then, they wait behind the halves due before them); "
            f"checks/s before the kill {k.rate_before:.0f}, after {k.rate_after:.0f}"
        )
        print(
            "  resolved twice | checked at once (store / endpoint) | checked again | wrong | "
            f"unresolved: {counts(k.audit, k.at_once_endpoint)}"
        )
        print(
            f"  asked twice at the check endpoint: {k.again_endpoint} "
            f"({k.again_not_orphan} of them not b0's claims)"
        )
        bad += (not k.audit.ok) + k.at_once_endpoint + k.again_not_orphan
    print(f"\nload average at end: {load_average()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
