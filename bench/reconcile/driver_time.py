"""The driver's time before the first job of a run, step by step (no Spark action is run): the
session's start (the JVM), the extract (reading the export's file listings and schemas), building
the detection's frames (each persist plans its frame), planning the whole job.  A fresh process
pays all of it every night; a warm Spark Connect server, the first step and most of the others.

    .venv/bin/python bench/reconcile/driver_time.py /tmp/rb/export-1000000 1000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from spark_reconcile import extract, generate
from spark_reconcile.config import KeyMapping, Thresholds, Window
from spark_reconcile.detect import detect
from spark_reconcile.session import build_session

DAY = dt.date(2026, 11, 20)  # run.py's day


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="a Parquet export written by run.py")
    parser.add_argument("n", type=int, help="its number of transactions (for the run's as-of)")
    opts = parser.parse_args()
    spec = generate.Synthetic(n=opts.n, day=DAY)
    window = Window.for_day(spec.day, as_of=spec.as_of)
    last = time.perf_counter()

    def step(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        print(f"{name}: {now - last:.1f} s", flush=True)
        last = now

    spark = build_session(master="local[2]", jars=[], shuffle_partitions=16, driver_memory="8g")
    step("session (JVM start)")
    store = extract.store_from_parquet(spark, str(opts.export), window)
    step("extract")

    def keep(df: DataFrame) -> DataFrame:
        return df.persist(StorageLevel.MEMORY_AND_DISK)

    found = detect(
        store,
        None,
        window=window,
        mapping=KeyMapping(),
        thresholds=Thresholds(),
        keep=keep,
    )
    step("detection's frames built")
    keep(found.repartition("kind"))
    step("the job's frame planned and kept")
    spark.stop()


if __name__ == "__main__":
    main()
