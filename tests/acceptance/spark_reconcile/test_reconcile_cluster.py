"""The reconciliation on a cluster: ``halfmq reconcile --master spark://...`` against a Spark
standalone cluster (a master and two workers, started from pyspark's own ``spark-class``) and
``halfmq reconcile --remote sc://...`` against a Spark Connect server running on that cluster, all
real processes on 127.0.0.1.

On the suite's planted store and banks (the store and Smith's ledger read over JDBC, Bob's ledger
from its Parquet export in a directory every process sees) each gives the report local mode gives:
the same anomaly rows and the same three report files.  The applications' event logs show that the
JDBC reads ran partitioned, as tasks of executors on both workers -- which also proves the driver
jar reached them (``spark.jars`` on the cluster, an uploaded artifact over Connect).

One cluster serves the module; the Connect server lives for its one test, since an application
holds the workers' cores for as long as it runs.  Every process starts in a session of its own and
is stopped by its process group (a worker's executors included)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

import sqlalchemy as sa
import typer
from reconcile_helpers import migrate, unavailable
from typer.testing import CliRunner

from spark_reconcile import cli, generate, plant
from spark_reconcile.anomalies.rows import ANOMALY_COLUMNS
from spark_reconcile.config import DEFAULT_LEDGER, ReconcileConfig
from spark_reconcile.export import export_ledger, ledger_path
from spark_reconcile.job import run

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

DAY = dt.date(2026, 11, 20)
SPEC = generate.Synthetic(n=2 * len(generate.SCENARIOS), day=DAY, period=len(generate.SCENARIOS))
PARTITIONS = 2  # --jdbc-partitions and --shuffle-partitions: a range per executor
TRANSACTION_PARTS = 4 * (PARTITIONS // 2) + 1  # 4 states x 1 slice of the day, + other states
FETCH_SIZE = 50  # --jdbc-fetch-size: several round trips per part even on these few rows
# Short-lived JVMs on a 2-core machine: the C1 compiler alone and the serial collector.  On a
# loaded machine the cluster's run took 80 s with them (and 2 partitions) against 230 s without.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
STARTED_WITHIN = 120.0  # s: a JVM starting on a loaded 2-core machine
RUN_WITHIN = 400.0  # s: one reconciliation on the cluster, executors' start included
REPORT_FILES = ("summary.json", "summary.md", "report.html")
LOOPBACK = ("--host", "127.0.0.1", "--port", "0", "--webui-port", "0")  # ports the system picks
WORKER = ("--cores", "1", "--memory", "1g")
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


# --- the processes --------------------------------------------------------------------------


@dataclasses.dataclass
class Daemon:
    """A JVM started in a session of its own, its output in ``log``."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def wait_for(self, pattern: str, within: float = STARTED_WITHIN) -> re.Match[str]:
        """The first match of ``pattern`` in the log, waited for at most ``within`` seconds;
        fails with the log's tail when the process died or the time ran out."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + within
        while True:
            found = regex.search(self.log.read_text(errors="replace"))
            if found:
                return found
            self.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: no {pattern!r} in {within:.0f} s\n{self.tail()}")
            time.sleep(0.5)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.process.returncode}\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def stop(self) -> None:
        """SIGTERM to the process group (a worker's executors are in it), then, once the JVM is
        gone or after 20 s, SIGKILL to whatever is left of the group."""
        self.send(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        self.send(signal.SIGKILL)
        self.process.wait(timeout=10)

    def send(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)


def spark_home() -> Path:
    """pyspark's package directory: its ``bin`` has ``spark-class`` and ``spark-submit``."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        unavailable(f"{home}/bin/spark-class is missing: reinstall pyspark")
    if shutil.which("java") is None:
        unavailable("java is not on PATH: the cluster's JVMs need Java 17")
    return home


def spark_env(root: Path, daemon_memory: str = "256m") -> dict[str, str]:
    """The environment of every process of the cluster, the job's included: loopback only, no
    inherited Spark session settings, small daemons (the Connect server counts as one: its
    driver's heap is ``daemon_memory``)."""
    inherited = ("SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT", "MASTER")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    (root / "local").mkdir(exist_ok=True)
    return env | {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_DAEMON_MEMORY": daemon_memory,
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def start(name: str, args: list[str], root: Path, daemon_memory: str = "256m") -> Daemon:
    log = root / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=spark_env(root, daemon_memory),
            cwd=root,
            start_new_session=True,
        )
    return Daemon(name, process, log)


@dataclasses.dataclass(frozen=True)
class Cluster:
    master_url: str
    root: Path
    work_dirs: tuple[Path, ...]


def alive_workers(ui_port: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as answer:
        return int(json.load(answer)["aliveworkers"])


def wait_for_workers(master: Daemon, ui_port: str, workers: list[Daemon], count: int) -> None:
    deadline = time.monotonic() + STARTED_WITHIN
    while alive_workers(ui_port) < count:
        for daemon in (master, *workers):
            daemon.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"{count} workers did not register in {STARTED_WITHIN:.0f} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers of one core and 1 GiB each, on ports the system picked."""
    root = tmp_path_factory.mktemp("cluster")
    spark_class = str(spark_home() / "bin" / "spark-class")
    started: list[Daemon] = []
    try:
        master = start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", *LOOPBACK],
            root,
        )
        started.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://\S+)")[1]
        ui_port = master.wait_for(r"Bound MasterWebUI to .* started at http://[^:\s]+:(\d+)")[1]
        work_dirs = tuple(root / f"work-{i}" for i in (1, 2))
        workers = [
            start(
                f"worker-{i}",
                [spark_class, WORKER_CLASS, url, *LOOPBACK, *WORKER, "--work-dir", str(work)],
                root,
            )
            for i, work in enumerate(work_dirs, 1)
        ]
        started += workers
        wait_for_workers(master, ui_port, workers, len(workers))
        yield Cluster(url, root, work_dirs)
    finally:
        for daemon in reversed(started):
            daemon.stop()


@dataclasses.dataclass(frozen=True)
class ConnectServer:
    url: str
    events: Path


@pytest.fixture
def connect_server(cluster: Cluster, tmp_path: Path) -> Iterator[ConnectServer]:
    """pyspark's Spark Connect server, a driver on the cluster; no JDBC driver on its classpath
    (the client uploads it).  Its event log shows where its tasks ran."""
    try:
        import grpc  # noqa: F401
        import pandas  # noqa: F401
    except ImportError as exc:
        unavailable(f'the Spark Connect client is not installed ({exc}): pip install -e ".[spark]"')
    events = tmp_path / "connect-events"
    events.mkdir()
    args = [str(spark_home() / "bin" / "spark-submit")]
    args += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    args += ["--name", "halfmq-connect-test", "--master", cluster.master_url]
    args += conf_args(application_conf(events))
    args += ["--conf", "spark.connect.grpc.binding.address=127.0.0.1"]
    args += ["--conf", "spark.connect.grpc.binding.port=0", "--conf", "spark.ui.enabled=false"]
    server = start("connect-server", args, tmp_path, daemon_memory="1g")
    try:
        address = server.wait_for(r"Spark Connect server started at: (\S+)")[1]
        port = address.rsplit(":", 1)[1]
        yield ConnectServer(f"sc://127.0.0.1:{port}", events)
    finally:
        server.stop()


def application_conf(events: Path) -> dict[str, str]:
    """An application's event log as one plain file in ``events`` (read by ``ran``); small
    executors and quick JVMs."""
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.executor.memory": "512m",
        "spark.driver.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
    }


def conf_args(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]


# --- the planted inputs and local mode's report ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Planted:
    store: str
    smith: str
    bob_export: Path

    def ledgers(self) -> list[tuple[str, str]]:
        return [("bob", f"parquet:{self.bob_export}"), ("smith", self.smith)]


@pytest.fixture(scope="module")
def planted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Planted:
    """The suite's planted store (every kind, twice) and banks on SQLite, and Bob's ledger
    exported to Parquet for the day and the next."""
    root = tmp_path_factory.mktemp("planted")
    store = f"sqlite:///{root / 'broker.db'}"
    engine = migrate(store)
    plant.insert_store(engine, generate.store(spark, SPEC))
    engine.dispose()
    banks = {}
    for bank, frame in generate.ledgers(spark, SPEC).items():
        banks[bank] = f"sqlite:///{root / (bank + '.db')}"
        bank_engine = sa.create_engine(banks[bank])
        plant.insert_ledger(bank_engine, frame)
        bank_engine.dispose()
    bob = sa.create_engine(banks["bob"])
    for day in (DAY, DAY + dt.timedelta(days=1)):
        export_ledger(bob, DEFAULT_LEDGER.with_url("bob", banks["bob"]), root, day)
    bob.dispose()
    return Planted(store, banks["smith"], ledger_path(root, "bob"))


def reconcile_args(planted: Planted, out: Path) -> list[str]:
    """The options every mode runs with; ``local_out`` runs the same as a config."""
    args = ["--date", DAY.isoformat(), "--database-url", planted.store]
    args += [arg for name, url in planted.ledgers() for arg in ("--ledger", f"{name}={url}")]
    args += ["--as-of", str(SPEC.as_of), "--jdbc-partitions", str(PARTITIONS)]
    args += ["--jdbc-fetch-size", str(FETCH_SIZE)]
    return [*args, "--shuffle-partitions", str(PARTITIONS), "--out", str(out)]


@pytest.fixture(scope="module")
def local_out(spark: Any, planted: Planted, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Local mode's output (this process's local[2] session) for the options of
    ``reconcile_args``; it finds every planted anomaly and nothing else."""
    out = tmp_path_factory.mktemp("local")
    config = ReconcileConfig(
        day=DAY,
        out=str(out),
        store_url=planted.store,
        ledgers=tuple(DEFAULT_LEDGER.with_url(n, u) for n, u in planted.ledgers()),
        as_of=SPEC.as_of,
        jdbc_partitions=PARTITIONS,
        jdbc_fetch_size=FETCH_SIZE,
        shuffle_partitions=PARTITIONS,
    )
    run(config, spark)
    assert sorted((row[0], row[2]) for row in anomaly_rows(spark, out)) == sorted(SPEC.expected())
    return out


def halfmq_reconcile(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``halfmq reconcile ARGS`` in a process of its own; exit 2 is the planted criticals.  The
    executors run no Python (the job has no Python function): a Python worker started for it
    would find no interpreter."""
    command = Path(sys.executable).with_name("halfmq")
    done = subprocess.run(
        [str(command), "reconcile", *args],
        env=env | {"PYSPARK_PYTHON": "/nonexistent/python3"},
        capture_output=True,
        text=True,
        timeout=RUN_WITHIN,
        check=False,
    )
    assert done.returncode == 2, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    assert "critical" in done.stdout
    return done


# --- what a run gave and where it ran -----------------------------------------------------------


def anomaly_rows(spark: Any, out: Path) -> list[tuple[Any, ...]]:
    """Every anomaly row of the day, every column, in a stable order."""
    frame = spark.read.parquet(str(out / "anomalies")).where(f"date = '{DAY}'")
    return sorted((tuple(row) for row in frame.select(*ANOMALY_COLUMNS).collect()), key=repr)


def assert_same_report(spark: Any, out: Path, local: Path) -> None:
    assert anomaly_rows(spark, out) == anomaly_rows(spark, local)
    for name in REPORT_FILES:
        day = f"date={DAY.isoformat()}"
        ours = (out / "report" / day / name).read_text()
        assert ours == (local / "report" / day / name).read_text(), name


@dataclasses.dataclass(frozen=True)
class Ran:
    """What one application's event log says ran where."""

    app_id: str
    executors: frozenset[str]
    tasks: Counter[str]  # per executor id
    jdbc_scans: tuple[tuple[int, frozenset[str]], ...]  # per stage reading JDBC: parts, executors


def ran(events: Path) -> Ran:
    """The event log in ``events`` (the only application there); a running server's log holds
    its completed stages (Spark flushes the log at each)."""
    (log,) = [p for p in events.iterdir() if p.is_file() and not p.name.startswith(".")]
    app_id, executors = "", set()
    tasks: Counter[str] = Counter()
    by_stage: dict[int, set[str]] = {}
    parts: dict[int, int] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_id = event["App ID"]
        elif kind == "SparkListenerExecutorAdded":
            executors.add(event["Executor ID"])
        elif kind == "SparkListenerTaskEnd":
            executor = event["Task Info"]["Executor ID"]
            tasks[executor] += 1
            by_stage.setdefault(event["Stage ID"], set()).add(executor)
        elif kind == "SparkListenerStageCompleted":
            stage = event["Stage Info"]
            jdbc = [r["Number of Partitions"] for r in stage["RDD Info"] if r["Name"] == "JDBCRDD"]
            if jdbc:
                parts[stage["Stage ID"]] = max(jdbc)
    scans = tuple((n, frozenset(by_stage.get(stage, ()))) for stage, n in parts.items())
    return Ran(app_id, frozenset(executors), tasks, scans)


def assert_partitioned_on_workers(done: Ran, cluster: Cluster) -> None:
    """Two executors, one on each worker, both ran tasks; the store's and Smith's ledger's JDBC
    reads were split as ``--jdbc-partitions`` says, and executors ran them."""
    assert len(done.executors) == 2
    assert set(done.tasks) == set(done.executors)
    for work in cluster.work_dirs:
        assert (work / done.app_id).is_dir(), f"no executor of {done.app_id} in {work}"
    parts = Counter(n for n, _ in done.jdbc_scans)
    assert parts[TRANSACTION_PARTS] >= 1, parts  # transactions, by state and slice
    assert parts[PARTITIONS] >= 3, parts  # messages, acks and Smith's ledger, by ranges
    for _, executors in done.jdbc_scans:
        assert executors
        assert executors <= done.executors


# --- the tests ----------------------------------------------------------------------------------


def test_standalone_cluster_gives_the_local_report(
    spark: Any, cluster: Cluster, planted: Planted, local_out: Path, tmp_path: Path
) -> None:
    out, events = tmp_path / "out", tmp_path / "events"
    events.mkdir()
    args = [*reconcile_args(planted, out), "--master", cluster.master_url]
    args += ["--driver-memory", "1g", *conf_args(application_conf(events))]
    halfmq_reconcile(args, spark_env(cluster.root))
    assert_same_report(spark, out, local_out)
    assert_partitioned_on_workers(ran(events), cluster)


def test_spark_connect_gives_the_local_report(
    spark: Any,
    cluster: Cluster,
    connect_server: ConnectServer,
    planted: Planted,
    local_out: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    args = [*reconcile_args(planted, out), "--remote", connect_server.url]
    halfmq_reconcile(args, spark_env(cluster.root))
    assert_same_report(spark, out, local_out)
    assert_partitioned_on_workers(ran(connect_server.events), cluster)


def test_an_unreachable_connect_server_stops_the_run_at_once(tmp_path: Path) -> None:
    """Exit 2 with the address, not the Connect client's minutes of retries."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = typer.Typer()  # one command: the app is that command
    app.command()(cli.reconcile)
    args = ["--date", DAY.isoformat(), "--parquet", str(tmp_path / "export")]
    args += ["--out", str(tmp_path / "out"), "--remote", f"sc://127.0.0.1:{port}"]
    started = time.monotonic()
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    assert f"no Spark Connect server answers at 127.0.0.1:{port}" in " ".join(done.output.split())
    assert time.monotonic() - started < 30
