"""Checks the bucketed export against the plain one (a check, not a timing; it fails loudly).

1. ``buckets.spark_hash`` (NumPy, what ``halfmq export --buckets`` uses) equals Spark's own
   ``hash`` on the planted transaction ids and on random strings (non-ASCII, every length mod 4,
   NULL), and so does the bucket: ``pmod(hash, N)``.
2. Every kind is planted into a migrated SQLite store (``generate``), exported twice through
   ``export_day`` -- plain, and with ``buckets`` -- for the day and the next; each bucketed file
   holds only rows whose Spark bucket is the one its name says.
3. The job reconciles both exports: the same anomaly rows (every column) and the same counts,
   exactly the planted store kinds.
4. The view's physical plan on the bucketed export has no shuffle Exchange (printed; the few
   parked copies are broadcast), where the plain export's shuffles each side of the join.

    .venv/bin/python bench/reconcile/buckets_check.py [--work /tmp/bk] [--buckets 4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import string
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from alembic import command
from alembic.config import Config
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_reconcile import buckets, extract, generate, plant
from spark_reconcile.anomalies import ledgers
from spark_reconcile.anomalies.view import transaction_view
from spark_reconcile.config import ReconcileConfig
from spark_reconcile.export import export_day
from spark_reconcile.job import run
from spark_reconcile.session import build_session

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 11, 20)
SPEC = generate.Synthetic(n=6 * len(generate.SCENARIOS), day=DAY, period=len(generate.SCENARIOS))


def check_hash(spark: SparkSession, values: list[str | None], n: int) -> None:
    frame = spark.createDataFrame([(v,) for v in values], "s string")
    spark_rows = frame.select(F.hash("s"), F.expr(f"pmod(hash(s), {n})")).collect()
    mine = buckets.spark_hash(pa.array(values, pa.string())).tolist()
    mine_buckets = buckets.bucket_ids(pa.array(values, pa.string()), n).tolist()
    wrong = [
        v
        for v, r, h, b in zip(values, spark_rows, mine, mine_buckets, strict=True)
        if (r[0], r[1]) != (h, b)
    ]
    assert not wrong, f"hash differs from Spark's for {wrong[:5]}"
    print(f"1. hash and bucket equal to Spark's on {len(values):,} values")


def random_strings(count: int) -> list[str | None]:
    rnd = random.Random(7)
    alphabet = string.printable + "éüß€日本語\u0080ÿ"
    found: list[str | None] = [None, "", "a", "ab", "abc", "abcd"]
    found += ["".join(rnd.choices(alphabet, k=rnd.randint(0, 41))) for _ in range(count)]
    return found


def planted_store(spark: SparkSession, work: Path) -> str:
    url = f"sqlite:///{work / 'broker.db'}"
    cfg = Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    plant.insert_store(engine, generate.store(spark, SPEC))
    return url


def export(url: str, out: Path, n: int) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    for day in (DAY, DAY + dt.timedelta(days=1)):
        export_day(engine, out, day, buckets=n)
    engine.dispose()


def check_files(spark: SparkSession, out: Path, n: int) -> None:
    files = sorted(out.glob("*/date=*/part-*_*.parquet"))
    assert files, "no bucketed file written"
    for file in files:
        ids = pq.read_table(file, columns=[buckets.COLUMN]).column(buckets.COLUMN)
        named = int(file.stem.rsplit("_", 1)[1])
        values = ids.to_pylist()
        frame = spark.createDataFrame([(v,) for v in values], "s string")
        got = {r[0] for r in frame.select(F.expr(f"pmod(hash(s), {n})")).collect()}
        assert got <= {named}, f"{file}: buckets {got}, named {named}"
    print(f"2. {len(files)} bucketed files, each only its own bucket's rows (Spark's hash)")


def anomalies(spark: SparkSession, out: Path) -> list[tuple[object, ...]]:
    rows = spark.read.parquet(str(out / "anomalies")).where(f"date = '{DAY}'")
    return sorted(tuple(r) for r in rows.drop("date").collect())


def reconcile(spark: SparkSession, export_root: Path, out: Path) -> dict[str, int]:
    shutil.rmtree(out, ignore_errors=True)
    config = ReconcileConfig(
        day=DAY, out=str(out), parquet=str(export_root), as_of=SPEC.as_of, shuffle_partitions=4
    )
    return run(config, spark).counts


def view_plan(spark: SparkSession, export_root: Path) -> str:
    config = ReconcileConfig(
        day=DAY, out="/nonexistent", parquet=str(export_root), as_of=SPEC.as_of
    )
    store = extract.store_from_parquet(spark, str(export_root), config.window)
    view: DataFrame = transaction_view(
        store.transactions, store.messages, store.scheduled, config.window
    )
    plan = view._jdf.queryExecution().executedPlan().toString()
    extract.drop_tables(spark, store.tables)
    return str(plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/halfmq-buckets-check"))
    parser.add_argument("--buckets", type=int, default=4)
    opts = parser.parse_args()
    shutil.rmtree(opts.work, ignore_errors=True)
    opts.work.mkdir(parents=True)
    spark = build_session(master="local[2]", jars=[], shuffle_partitions=4, driver_memory="2g")
    spark.sparkContext.setLogLevel("ERROR")
    ids = [generate.tx_id(i) for i in range(SPEC.n)]
    check_hash(spark, ids + random_strings(20_000), opts.buckets)

    url = planted_store(spark, opts.work)
    plain, bucketed = opts.work / "export-plain", opts.work / "export-bucketed"
    export(url, plain, 0)
    export(url, bucketed, opts.buckets)
    check_files(spark, bucketed, opts.buckets)

    counts_plain = reconcile(spark, plain, opts.work / "out-plain")
    counts_bucketed = reconcile(spark, bucketed, opts.work / "out-bucketed")
    rows_plain = anomalies(spark, opts.work / "out-plain")
    rows_bucketed = anomalies(spark, opts.work / "out-bucketed")
    assert rows_plain == rows_bucketed, "the bucketed export's anomalies differ"
    assert counts_plain == counts_bucketed
    planted = Counter(k for k, _ in SPEC.expected() if k not in {x.name for x in ledgers.KINDS})
    assert Counter({k: v for k, v in counts_bucketed.items() if v}) == planted, counts_bucketed
    print(f"3. the same {len(rows_bucketed)} anomaly rows and counts from both, as planted")

    bucketed_plan, plain_plan = view_plan(spark, bucketed), view_plan(spark, plain)
    print("4. the view's physical plan on the bucketed export:\n" + bucketed_plan)
    shuffle = "Exchange hashpartitioning("
    assert shuffle not in bucketed_plan, "the bucketed view still shuffles"
    assert plain_plan.count(f"{shuffle}transaction_id") == 2, plain_plan
    print("   no shuffle Exchange (only the parked copies' broadcast); the plain export's plan")
    print("   shuffles both sides by transaction_id")
    spark.stop()


if __name__ == "__main__":
    main()
