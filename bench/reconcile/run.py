"""Benchmark of the nightly reconciliation (never a timed test: it prints figures measured in
one run).

For each N (default 1M and 10M transactions) it generates a synthetic store with
``spark_reconcile.generate`` (half + op + real message + ack per transaction, 1.3 % planted
anomalies), writes it as a ``halfmq export`` Parquet tree and bulk-loads it (COPY) into a
migrated PostgreSQL schema, then times ``python -m spark_reconcile --master local[2]`` -- a fresh
process, JVM start included -- on each source, checks the anomalies found against the planted
ones, and prints the times and the 10M/1M ratio.

    .venv/bin/python bench/reconcile/run.py                      # 1M and 10M, both sources
    .venv/bin/python bench/reconcile/run.py --sizes 100000 --sources parquet
    .venv/bin/python bench/reconcile/run.py --sizes 1000000 --sources parquet --reuse \
        --work /tmp/rb --event-log /tmp/rb/events       # then: bench/reconcile/stages.py DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from pyspark.sql import DataFrame, SparkSession

from broker_service.store import schema
from spark_reconcile import generate, plant
from spark_reconcile.anomalies import ledgers

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 11, 20)
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
LOADED = ("transactions", "messages", "deliveries", "subscriptions", "consumer_groups")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def session(memory: str) -> SparkSession:
    return (
        SparkSession.builder.master("local[2]")
        .appName("halfmq-reconcile-bench-generate")
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", "16")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def expected_counts(spec: generate.Synthetic) -> Counter[str]:
    full, rest = divmod(spec.n, spec.period)
    return Counter({kind: full + (1 if k < rest else 0) for k, kind in enumerate(generate.PLANTED)})


def to_parquet(
    spark: SparkSession, spec: generate.Synthetic, root: Path, reuse: bool, buckets: int = 0
) -> float:
    if reuse and (root / "consumer_groups").is_dir():  # written last
        return 0.0
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    plant.write_export(generate.store(spark, spec), str(root), spec.day, buckets)
    return time.perf_counter() - started


def _copy_file(dsn: str, search_path: str, table: str, columns: list[str], path: Path) -> None:
    sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv)"
    with (
        psycopg.connect(dsn, options=f"-csearch_path={search_path}") as conn,
        conn.cursor() as cur,
        cur.copy(sql) as copy,
        path.open("rb") as f,
    ):
        while chunk := f.read(1 << 20):
            copy.write(chunk)


def _loaded(name: str, n: int) -> bool:
    engine = sa.create_engine(PG)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(f"SELECT count(*) FROM {name}.transactions")).scalar() == n
    except sa.exc.DBAPIError:
        return False
    finally:
        engine.dispose()


def to_postgres(
    spark: SparkSession, spec: generate.Synthetic, name: str, tmp: Path, reuse: bool
) -> float:
    """A migrated schema ``name`` holding the synthetic store: CSV from Spark, COPY into
    PostgreSQL with the secondary indexes dropped, the indexes rebuilt, ANALYZE."""
    if reuse and _loaded(name, spec.n):
        return 0.0
    admin = sa.create_engine(PG)
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        conn.execute(sa.text(f"CREATE SCHEMA {name}"))
    url = f"{PG}?options=-csearch_path%3D{name}"
    cfg = Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")
    engine = sa.create_engine(url)
    started = time.perf_counter()
    tables = generate.store(spark, spec)
    with engine.begin() as conn:
        for table in LOADED:
            for index in schema.metadata.tables[table].indexes:
                index.drop(conn)
    dsn = PG.replace("postgresql+psycopg", "postgresql")
    for table in LOADED:
        frame: DataFrame = tables[table]
        if table == "messages":
            frame = frame.withColumn("body", frame["encoding"].substr(0, 0))  # '' -> empty bytea
        out = tmp / table
        shutil.rmtree(out, ignore_errors=True)
        frame.write.option("escape", '"').option("emptyValue", '""').csv(str(out))
        parts = sorted(out.glob("part-*.csv"))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(_copy_file, dsn, name, table, frame.columns, p) for p in parts]
            for job in jobs:
                job.result()
        shutil.rmtree(out)
        log(f"  loaded {table}")
    with engine.begin() as conn:
        for table in LOADED:
            for index in schema.metadata.tables[table].indexes:
                index.create(conn)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    engine.dispose()
    admin.dispose()
    return time.perf_counter() - started


def _event_log_env(event_log: Path | None) -> dict[str, str]:
    """The environment of the job's process: with ``event_log``, Spark writes its event log
    there (uncompressed, one file), for ``stages.py`` to sum the executor time per stage."""
    env = dict(os.environ)
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
        confs = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log.resolve().as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
        args = " ".join(f"--conf {k}={v}" for k, v in confs.items())
        env["PYSPARK_SUBMIT_ARGS"] = f"{args} pyspark-shell"
    return env


def reconcile(
    spec: generate.Synthetic,
    source: list[str],
    out: Path,
    memory: str,
    event_log: Path | None = None,
    conf: list[str] | None = None,
    remote: str | None = None,
) -> float:
    shutil.rmtree(out, ignore_errors=True)
    args = [sys.executable, "-m", "spark_reconcile", "--date", spec.day.isoformat()]
    args += [*source, "--out", str(out), "--as-of", str(spec.as_of), "--jdbc-partitions", "8"]
    if remote:  # the server's own driver, memory and event log (started with them)
        args += ["--remote", remote]
    else:
        args += ["--master", "local[2]", "--driver-memory", memory]
    for setting in conf or []:
        args += ["--conf", setting]
    started = time.perf_counter()
    env = _event_log_env(event_log)
    with subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as job:
        meter = CpuMeter(job.pid)
        stdout, stderr = job.communicate()
        cpu = meter.stop()
    elapsed = time.perf_counter() - started
    log(f"  machine load average after the run: {os.getloadavg()[0]:.1f} (2 CPUs)")
    log(f"  the job's processes used {cpu:.1f} s of CPU (Python and the driver's JVM)")
    log(f"  by thread: {meter.by_thread()}")
    done = subprocess.CompletedProcess(args, job.returncode, stdout, stderr)
    if done.returncode != 2:
        raise SystemExit(f"reconcile exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    summary = json.loads((out / "report" / f"date={spec.day}" / "summary.json").read_text())
    found = Counter({k: v["count"] for k, v in summary["counts"].items() if v["count"]})
    planted = expected_counts(spec)
    planted_store = Counter({k: n for k, n in planted.items() if not _ledger_kind(k)})
    if found != planted_store:
        raise SystemExit(f"found {dict(found)}\nplanted {dict(planted_store)}")
    return elapsed


class CpuMeter:
    """The CPU time (user + system) of a process and its descendants, sampled from ``/proc``
    every ``every`` s until ``stop``: on a shared machine the work a run did, where its wall
    time is the neighbours' too.  (The job's JVM is never waited for by its parent, so the
    rusage of children would miss it.)  Per thread name too (``by_thread``): the JVM's JIT
    compilers, GC, task threads and py4j's threads (the driver's planning)."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid, self.every = pid, every
        self.seen: dict[int, float] = {}
        self.threads: dict[tuple[int, int], tuple[str, float]] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        return tree

    @staticmethod
    def _stat(path: Path) -> tuple[str, float] | None:
        """A process's or thread's name and CPU seconds, from its ``stat``."""
        try:
            text = path.read_text()
        except OSError:
            return None
        name = text[text.index("(") + 1 : text.rindex(")")]
        utime, stime = text.rsplit(")", 1)[1].split()[11:13]
        return name, (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> None:
        while not self.done.wait(self.every):
            for pid in self._tree():
                process = self._stat(Path("/proc") / str(pid) / "stat")
                if process is None:
                    continue
                self.seen[pid] = process[1]
                for task in (Path("/proc") / str(pid) / "task").glob("*"):
                    found = self._stat(task / "stat")
                    if found is not None:
                        self.threads[pid, int(task.name)] = found

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return sum(self.seen.values())

    def by_thread(self, top: int = 6) -> str:
        """The CPU seconds per thread name (numbers dropped: ``C2 CompilerThread0`` and ``1``
        are one), the biggest first."""
        named: Counter[str] = Counter()
        for name, cpu in self.threads.values():
            named[re.sub(r"[\s#-]*\d+$", "", name)] += cpu
        return ", ".join(f"{name} {cpu:.1f} s" for name, cpu in named.most_common(top))


def _ledger_kind(kind: str) -> bool:
    return kind in {k.name for k in ledgers.KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--sources", nargs="+", default=["parquet", "postgres"])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "reconcile")
    parser.add_argument("--memory", default="8g")
    parser.add_argument(
        "--reuse", action="store_true", help="keep an existing Parquet export / loaded schema"
    )
    parser.add_argument(
        "--event-log",
        type=Path,
        help="write the job's Spark event logs here (read them with bench/reconcile/stages.py)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        help="KEY=VALUE passed to the job's --conf (repeat), to compare settings on one code",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        default=0,
        help="write the export bucketed by transaction id in N buckets (halfmq export "
        "--buckets), to export-N-bucketed-B; 0: the plain layout",
    )
    parser.add_argument(
        "--remote",
        help="sc://HOST:PORT: run the job on this Spark Connect server (started beforehand, "
        "see README.md) instead of a fresh local[2] driver",
    )
    opts = parser.parse_args()
    opts.work.mkdir(parents=True, exist_ok=True)
    spark = session(opts.memory)
    spark.sparkContext.setLogLevel("ERROR")
    times: dict[tuple[str, int], float] = {}
    for n in opts.sizes:
        spec = generate.Synthetic(n=n, day=DAY)
        for source in opts.sources:
            if source == "parquet":
                bucketed = f"-bucketed-{opts.buckets}" if opts.buckets else ""
                root = opts.work / f"export-{n}{bucketed}"
                log(f"N={n:,}: generating the Parquet export{bucketed}")
                took = to_parquet(spark, spec, root, opts.reuse, opts.buckets)
                log(f"  generated in {took:.1f} s")
                args = ["--parquet", str(root)]
            else:
                name = f"bench_recon_{n}"
                log(f"N={n:,}: loading PostgreSQL schema {name}")
                log(f"  loaded in {to_postgres(spark, spec, name, opts.work, opts.reuse):.1f} s")
                args = ["--database-url", f"{PG}?options=-csearch_path%3D{name}"]
            log(f"N={n:,}: reconciling from {source}")
            out = opts.work / f"out-{source}-{n}"
            log_dir = opts.event_log / f"{source}-{n}" if opts.event_log else None
            times[source, n] = reconcile(
                spec, args, out, opts.memory, log_dir, opts.conf, opts.remote
            )
            log(f"  {source} N={n:,}: {times[source, n]:.1f} s (anomalies as planted)")
    spark.stop()
    print("\nsource    transactions   seconds")
    for (source, n), seconds in times.items():
        print(f"{source:9} {n:>12,}   {seconds:7.1f}")
    small, big = min(opts.sizes), max(opts.sizes)
    for source in opts.sources:
        if small != big and (source, small) in times and (source, big) in times:
            ratio = times[source, big] / times[source, small]
            print(f"{source}: {big:,} / {small:,} time ratio = {ratio:.2f}")


if __name__ == "__main__":
    main()
