"""``halfmq demo``: the broker and both banks as real processes, concurrent transfers with faults,
the wait until everything settles, and the proof read back from the banks' databases.  The broker
runs with the ACL on (:mod:`demo_bank.acl`): the banks sign with their own keys, the runner's own
requests to the broker as the operator, and at 40 % of the run the outsider tries to get in where
it does not belong (:mod:`demo_bank.outsider`).

:func:`run` does the work and returns a :class:`DemoResult`; :mod:`demo_bank.report` prints it.
Every process it starts is stopped by PID when it returns -- also on Ctrl-C and SIGTERM."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import func, select

from broker_service.store import migrate
from broker_service.store import schema as broker_schema
from demo_bank.cluster import Cluster, make_cluster
from demo_bank.db import make_engine
from demo_bank.outsider import OutsiderReport, outsider_invariant, run_outsider
from demo_bank.plan import BOB_ACCOUNTS, OPENING_BALANCE, SMITH_ACCOUNTS, Plan, make_plan
from demo_bank.processes import Service
from demo_bank.proof import (
    BankView,
    BrokerView,
    Invariant,
    prove,
    read_bank,
    read_broker,
)
from demo_bank.reconcile import ReconcileOutcome, run_reconcile, spark_missing
from demo_bank.schema import CREDIT, DEBIT
from demo_bank.settings import BOB_GROUP, SMITH_GROUP
from demo_bank.stores import DEFAULT_PG, Stores, postgresql_stores, sqlite_stores
from demo_bank.traffic import Fate, Traffic

CLIENT_NAMES = {
    "halfmq": "clients: halfmq's framework (REST)",
    "rocketmq": "clients: RocketMQ's Python client (gRPC)",
}


@dataclass(frozen=True, slots=True)
class DemoConfig:
    transfers: int = 3000
    store: str = "sqlite"  # sqlite | postgresql
    seed: int = 7
    faults: bool = True
    concurrency: int = 32
    run_dir: Path = Path("halfmq-demo")
    pg_url: str = DEFAULT_PG
    pg_prefix: str = "halfmq_demo"
    settle_timeout: float = 90.0
    reconcile: bool = True
    clients: str = "halfmq"  # halfmq | rocketmq (the banks on RocketMQ's Python client, gRPC)


@dataclass
class DemoResult:
    config: DemoConfig
    plan: Plan
    stores: Stores
    outcomes: dict[str, int] = field(default_factory=dict)
    fates: dict[int, Fate] = field(default_factory=dict)  # each transfer, as the runner saw it
    resent_503: int = 0
    events: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    settled: bool = False
    pending: list[str] = field(default_factory=list)
    bob: BankView | None = None
    smith: BankView | None = None
    broker: BrokerView | None = None
    invariants: list[Invariant] = field(default_factory=list)
    reconcile: ReconcileOutcome | None = None
    outsider: OutsiderReport | None = None
    resent_dead_letters: list[str] = field(default_factory=list)  # transfer ids the operator resent

    @property
    def ok(self) -> bool:
        return self.settled and bool(self.invariants) and all(i.ok for i in self.invariants)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


class Interrupted(Exception):
    """SIGTERM while the demo runs (Ctrl-C is Python's KeyboardInterrupt)."""


@contextmanager
def _terminate_raises() -> Iterator[None]:
    def raise_(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, raise_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def prepare_stores(config: DemoConfig) -> Stores:
    config.run_dir.mkdir(parents=True, exist_ok=True)
    if config.store == "postgresql":
        return postgresql_stores(config.pg_url, config.pg_prefix)
    if config.store == "sqlite":
        return sqlite_stores(config.run_dir)
    raise ValueError(f"--store is sqlite or postgresql, not {config.store!r}")


def run(config: DemoConfig, console: Console | None = None) -> DemoResult:
    console = console or Console()
    started = time.monotonic()
    first_day = dt.datetime.now(dt.UTC).date()
    missing = spark_missing() if config.reconcile else None
    if missing is not None:
        console.print(
            f"[yellow]note[/yellow] {missing}: the reconciliation will be skipped; "
            "everything else runs and every invariant is checked"
        )
    stores = prepare_stores(config)
    plan = make_plan(
        config.transfers, config.seed, config.faults, broker_restart=config.clients == "halfmq"
    )
    result = DemoResult(config, plan, stores)

    def say(text: str, label: str = "fault") -> None:
        result.events.append(text)
        console.print(f"[yellow]{label}[/yellow] {text}")

    for log in ("broker.log", "bob.log", "smith.log", "reconcile.log"):
        (config.run_dir / log).unlink(missing_ok=True)
    cluster = make_cluster(stores, config.run_dir, config.seed, config.faults, config.clients)
    with _terminate_raises():
        try:
            migrate.upgrade(stores.broker)
            cluster.start()
            _open_accounts(cluster)
            result.timings["start-up"] = time.monotonic() - started
            console.print(
                f"broker pid {cluster.broker.pid} {cluster.broker.url} · Bob pid {cluster.bob.pid} "
                f"{cluster.bob.url} · Smith pid {cluster.smith.pid} {cluster.smith.url} · "
                f"store {config.store} · {CLIENT_NAMES[config.clients]} · "
                f"logs in {config.run_dir}/"
            )
            began = time.monotonic()
            _send(cluster, plan, config, result, console, say)
            result.timings["transfers"] = time.monotonic() - began
            began = time.monotonic()
            result.settled, result.pending = _settle(cluster, stores, config, result, console, say)
            result.timings["settle"] = time.monotonic() - began
        finally:
            cluster.stop()
    result.bob = read_bank(stores.bob, DEBIT)
    result.smith = read_bank(stores.smith, CREDIT)
    result.broker = read_broker(stores.broker)
    result.invariants = prove(result.bob, result.smith, result.broker, plan.opening_total)
    result.invariants.append(outsider_invariant(result.outsider, result.bob, result.broker))
    if config.reconcile:
        console.print("running the reconciliation job (Spark) on this run's data ...")
        result.reconcile = run_reconcile(
            stores,
            config.run_dir / "reconcile",
            dt.datetime.now(dt.UTC).date(),
            config.run_dir / "reconcile.log",
            first_day,
        )
    result.timings["total"] = time.monotonic() - started
    return result


def _open_accounts(cluster: Cluster) -> None:
    with httpx.Client(timeout=10) as client:
        for service, names, balance in (
            (cluster.bob, BOB_ACCOUNTS, OPENING_BALANCE),
            (cluster.smith, SMITH_ACCOUNTS, 0),
        ):
            for name in names:
                response = client.post(
                    f"{service.url}/accounts", json={"account_id": name, "balance": balance}
                )
                response.raise_for_status()


def _send(
    cluster: Cluster,
    plan: Plan,
    config: DemoConfig,
    result: DemoResult,
    console: Console,
    say: Any,
) -> None:
    columns = (
        TextColumn("transfers"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("transfers", total=len(plan.transfers), rate="")
        began = time.monotonic()

        def advance() -> None:
            progress.advance(task)

        traffic = Traffic(cluster.bob, plan, config.concurrency, say, advance)
        pending_events = sorted(plan.events.items(), key=lambda item: item[1])

        def on_progress(done: int) -> None:
            elapsed = max(time.monotonic() - began, 1e-6)
            progress.update(task, rate=f"{done / elapsed:,.0f}/s")
            while pending_events and done >= pending_events[0][1]:
                name, _ = pending_events.pop(0)
                if name == "outsider":
                    result.outsider = _outsider(cluster, result.stores.broker, say)
                else:
                    _fire(name, cluster, traffic, config.seed, say)

        traffic.send_all(on_progress)  # interrupted: its client is left to the process's exit
        traffic.close()
    result.outcomes = dict(traffic.outcomes)
    result.fates = dict(traffic.fates)
    result.resent_503 = traffic.resent


def _fire(name: str, cluster: Cluster, traffic: Traffic, seed: int, say: Any) -> None:
    if name == "kill-bob":
        traffic.kill_bob_after_commit(seed)
    elif name == "kill-smith":
        pid, seconds = _kill_and_restart(cluster.smith)
        say(
            f"Smith (pid {pid}) SIGKILLed mid-batch; restarted in {seconds:.1f}s: its credits "
            "committed but not acked come again"
        )
    elif name == "restart-broker":
        pid, seconds = _kill_and_restart(cluster.broker)
        say(
            f"broker (pid {pid}) SIGKILLed and restarted in {seconds:.1f}s "
            "(Bob and Smith ride through on their retries)"
        )


def _kill_and_restart(service: Service) -> tuple[int | None, float]:
    """SIGKILL ``service`` and start it again: the pid it had, and the seconds that took."""
    pid, began = service.pid, time.monotonic()
    service.kill()
    service.start()
    return pid, time.monotonic() - began


def _outsider(cluster: Cluster, broker_db: str, say: Any) -> OutsiderReport:
    """The outsider's attempts, while the transfers go on in the traffic's threads."""
    report = run_outsider(cluster.broker.url, broker_db, cluster.keys)
    if report.target is None:
        say(f"outsider: {report.note}", "acl")
    else:
        say(
            f"outsider: {report.summary()} against Bob's transaction "
            f"{report.target.transaction_id} ({report.target.state} then)",
            "acl",
        )
    return report


# -- settling ----------------------------------------------------------------------------------


def _settle(
    cluster: Cluster,
    stores: Stores,
    config: DemoConfig,
    result: DemoResult,
    console: Console,
    say: Any,
) -> tuple[bool, list[str]]:
    """Wait (bounded) until nothing is pending; the operator resends dead letters once the
    account they need is open.  ``(settled, what is still pending)``.  Requests to the broker
    sign as the operator; those to the banks go on a client of their own, which signs nothing."""
    deadline = time.monotonic() + config.settle_timeout
    pending: list[str] = []
    with (
        cluster.operator() as broker,
        httpx.Client(timeout=10) as banks,
        console.status("waiting for check-backs, retries and credits to settle ...") as status,
    ):
        while True:
            result.resent_dead_letters += _operator_fixes(broker, banks, cluster, say)
            pending = _pending(broker, stores)
            if not pending:
                return True, []
            if time.monotonic() > deadline:
                return False, pending
            status.update("settling: " + "; ".join(pending))
            time.sleep(0.5)


def _operator_fixes(
    broker: httpx.Client, banks: httpx.Client, cluster: Cluster, say: Any
) -> list[str]:
    """A dead letter whose receiver has no account: open the account, resend the message.  The
    transfer ids resent."""
    base = f"/v1/consumer-groups/{SMITH_GROUP}/dlq"
    resent_ids: list[str] = []
    try:
        dead = broker.get(base).json()["messages"]
    except (httpx.HTTPError, ValueError, KeyError):
        return resent_ids  # the broker is down, or refused: _pending says so
    for message in dead:
        if message.get("resent_at"):
            continue
        transfer = orjson.loads(message["body"])
        account = banks.get(f"{cluster.smith.url}/accounts/{transfer['to']}")
        if account.status_code == 404:
            banks.post(
                f"{cluster.smith.url}/accounts", json={"account_id": transfer["to"], "balance": 0}
            )
        resent = broker.post(f"{base}/{message['msg_id']}/resend")
        if resent.is_success:
            resent_ids.append(transfer["transfer_id"])
            say(
                f"operator: transfer {transfer['transfer_id']} was dead-lettered (no account "
                f"{transfer['to']} at Smith's bank); opened the account and resent it from the DLQ"
            )
        else:
            say(f"operator: resending {message['msg_id']} was answered {resent.status_code}")
    return resent_ids


def _pending(broker: httpx.Client, stores: Stores) -> list[str]:
    pending = []
    t = broker_schema.transactions
    engine = make_engine(stores.broker)
    try:
        with engine.connect() as conn:
            open_halves = conn.execute(
                select(func.count())
                .select_from(t)
                .where(t.c.producer_group == BOB_GROUP, t.c.state.in_(("PREPARED", "DISCARDED")))
            ).scalar_one()
    finally:
        engine.dispose()
    if open_halves:
        pending.append(f"{open_halves} halves not yet committed or rolled back")
    debits = read_bank(stores.bob, DEBIT).entries
    credits = read_bank(stores.smith, CREDIT).entries
    uncredited = len(debits.keys() - credits.keys())
    if uncredited:
        pending.append(f"{uncredited} debits not yet credited")
    try:
        response = broker.get(f"/v1/consumer-groups/{SMITH_GROUP}")
        view = response.json()
    except (httpx.HTTPError, ValueError):
        pending.append("the broker does not answer")
        return pending
    if response.status_code != 200:  # a refusal must not read as "no lag"
        pending.append(f"the broker answered the operator's view of {SMITH_GROUP} with "
                       f"{response.status_code}")  # fmt: skip
        return pending
    for name in ("lag", "in_flight", "retrying"):
        if view.get(name):
            pending.append(f"Smith's {name.replace('_', ' ')} {view[name]}")
    return pending
