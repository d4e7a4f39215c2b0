"""One reconciliation run: extract, detect, load, report."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

from spark_reconcile import breaks, extract, load, stakes
from spark_reconcile.anomalies import SEVERITY
from spark_reconcile.config import ReconcileConfig, Window, day_start_ms
from spark_reconcile.detect import detect
from spark_reconcile.jdbc import MissingDriverError, driver_for, find_jars, to_jdbc
from spark_reconcile.policy import Policy, default_policy
from spark_reconcile.report import write_report
from spark_reconcile.session import build_session, is_connect
from spark_reconcile.summary import BreakFigures, Stakes, Summary

ROWS_PER_KIND = 1000  # the report lists every anomaly up to this many of a kind (Parquet: all)
TREND_DAYS = 30
SIDE_BY_SIDE = 4  # threads running the run's independent small jobs at once


def session_for(config: ReconcileConfig, driver_memory: str | None = "4g") -> SparkSession:
    """The run's session, with the JDBC drivers of its databases; a run that reads only Parquet
    (``--parquet`` and ``parquet:`` ledgers) needs no driver jar at all.  A classic session is
    checked to load them; a Connect client uploads them to its server."""
    urls = [s.url for s in config.ledgers if s.parquet_path is None]
    if config.store_url is not None:
        urls.append(config.store_url)
    drivers = list({d.kind: d for d in map(driver_for, urls)}.values())
    jars = find_jars(drivers, config.jars)
    spark = build_session(
        master=config.master or None,
        jars=jars,
        shuffle_partitions=config.shuffle_partitions,
        driver_memory=driver_memory,
        remote=config.remote or None,
        conf=config.spark_conf,
    )
    if is_connect(spark):  # the jars went up with the session: no JVM here to ask
        return spark
    missing = [d for d in drivers if not _loadable(spark, d.java_class)]
    if missing:
        raise MissingDriverError(
            f"{', '.join(d.java_class for d in missing)} is not on the driver's classpath: under "
            f"spark-submit, give the jars to spark-submit itself: --jars {','.join(jars)}"
        )
    return spark


def _loadable(spark: SparkSession, java_class: str) -> bool:
    """Whether the driver JVM can load ``java_class`` (jars added after the JVM started, as
    under spark-submit, are not)."""
    jvm: Any = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.util.Utils.classForName(java_class, True, False)
    except Exception:
        return False
    return True


def _source(config: ReconcileConfig) -> str:
    if config.parquet is not None:
        return f"parquet:{config.parquet}"
    url = config.store_url or ""
    return url if url.startswith("jdbc:") else make_url(url).render_as_string(hide_password=True)


def _sources(
    spark: SparkSession, config: ReconcileConfig, window: Window
) -> tuple[extract.StoreFrames, DataFrame | None]:
    """The store (over JDBC, or its export) and the ledgers, read for ``window``."""
    if config.store_url is not None:
        store = extract.store_from_jdbc(
            spark, config.store_url, window, config.jdbc_partitions, config.jdbc_fetch_size
        )
    else:
        assert config.parquet is not None
        store = extract.store_from_parquet(spark, config.parquet, window)
    ledger = extract.read_ledgers(
        spark, config.ledgers, window, config.jdbc_partitions, config.jdbc_fetch_size
    )
    return store, ledger


def _detect(
    spark: SparkSession,
    config: ReconcileConfig,
    window: Window,
    keep: Callable[[DataFrame], DataFrame],
    tables: list[str],
) -> tuple[DataFrame, DataFrame | None, extract.StoreFrames]:
    """The detection over ``window``; the catalog tables made to read a bucketed export are
    added to ``tables`` (dropped when the run ends)."""
    store, ledger = _sources(spark, config, window)
    tables.extend(store.tables)
    found = detect(
        store,
        ledger,
        window=window,
        mapping=config.key_mapping,
        thresholds=config.thresholds,
        keep=keep,
    )
    return found, ledger, store


def run(config: ReconcileConfig, spark: SparkSession, report_dir: Path | None = None) -> Summary:
    """The day's run.  The anomalies are written first (the detection, the one big job); what
    is read of them afterwards -- counts, match rates, breaks, their figures, the trend -- is
    many small jobs that depend on them and not on each other, so they run side by side
    (``SIDE_BY_SIDE`` threads), as do the reads that need no anomaly (the operators' statuses,
    the sources' cut-offs) beside the detection: each small job's planning and scheduling is
    driver time, and one after another they kept a core idle."""
    window = config.window
    policy = config.policy or default_policy(SEVERITY)
    kept: list[DataFrame] = []
    tables: list[str] = []

    def keep(df: DataFrame) -> DataFrame:
        kept.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return kept[-1]

    pool = ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="reconcile")
    try:
        statuses = pool.submit(read_statuses, spark, config)
        detected, ledger, store = _detect(spark, config, window, keep, tables)
        scanned = pool.submit(stakes.scanned, store, ledger)
        found = keep(detected.repartition("kind"))
        load.write_anomalies(found, config.out, config.day)
        counted = pool.submit(_counted, spark, config, found)
        rates = pool.submit(stakes.match_rates, store.transactions, found)
        groups = pool.submit(stakes.per_consumer_group, found)
        by_id, statuses_from = statuses.result()
        judged = _breaks(spark, config, found, ledger, keep, tables, by_id, policy)
        break_groups = pool.submit(load.break_groups, judged)
        break_rows = load.break_rows(judged, ROWS_PER_KIND)
        figures = BreakFigures.of(break_groups.result(), break_rows, statuses_from=statuses_from)
        at_stake = Stakes(
            rates=rates.result(),
            consumer_groups=groups.result(),
            cutoffs=stakes.cutoffs(scanned.result(), rates.result()),
        )
        counts, picked, trend = counted.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for df in kept:
            df.unpersist()
        extract.drop_tables(spark, tables)
    summary = Summary(
        day=config.day,
        source=_source(config),
        window=dataclasses.asdict(window),
        counts=counts,
        rows=picked,
        trend=trend,
        ledgers=tuple(s.name for s in config.ledgers),
        console_url=config.console_url,
        breaks=figures,
        policy=policy,
        stakes=at_stake,
    )
    directory = report_dir or Path(config.out) / "report" / f"date={config.day.isoformat()}"
    write_report(summary, directory)
    return summary


def _counted(
    spark: SparkSession, config: ReconcileConfig, found: DataFrame
) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]], list[tuple[dt.date, dict[str, int]]]]:
    """The day's count of every kind and the report's rows of each, the counts written to
    ``OUT/summary/date=D``, and the trend read back (today's included)."""
    counts, picked = load.counts_and_samples(found, ROWS_PER_KIND)
    load.write_counts(spark, counts, config.out, config.day)
    return counts, picked, load.read_trend(spark, config.out, config.day, TREND_DAYS)


def _breaks(
    spark: SparkSession,
    config: ReconcileConfig,
    found: DataFrame,
    ledger: DataFrame | None,
    keep: Callable[[DataFrame], DataFrame],
    tables: list[str],
    statuses: dict[str, dict[str, Any]],
    policy: Policy,
) -> DataFrame:
    """The day's breaks and those carried from the latest earlier run, re-evaluated on today's
    data (a second detection over the days they were first seen on, up to today's horizon,
    kept to their ids), with amounts, statuses and ages; written to ``OUT/breaks/date=D``."""
    window = config.window
    carried = None
    before = breaks.latest_before(config.out, config.day)
    if before is not None:
        previous = keep(breaks.read_open(spark, config.out, before))
        first = previous.agg(F.min("first_seen")).first()
        if first is not None and first[0] is not None and day_start_ms(first[0]) < window.start:
            span = Window(day_start_ms(first[0]), window.start, window.horizon, window.as_of)
            again, _, _ = _detect(spark, config, span, keep, tables)
            ids = previous.select("break_id")
            still = breaks.of_anomalies(again).join(ids, "break_id", "left_semi")
            carried = breaks.carried(previous, keep(still))
    every = breaks.with_amounts(
        breaks.today_and_carried(breaks.of_anomalies(found), carried, config.day), ledger
    )
    judged = breaks.judged(
        every,
        breaks.statuses_frame(spark, statuses),
        as_of=window.as_of,
        max_age_ms={kind: policy.max_age_ms(kind) for kind in SEVERITY},
    )
    path = load.day_path(config.out, "breaks", config.day)
    judged.write.mode("overwrite").parquet(path)
    # Read back: the figures are two small jobs over the written breaks, not two more plans of
    # both detections (whose analysis alone took minutes).
    return spark.read.parquet(path)


def read_statuses(
    spark: SparkSession, config: ReconcileConfig
) -> tuple[dict[str, dict[str, Any]], str]:
    """The operators' statuses of the breaks (the console writes them into the broker's store),
    by break id, and where they were read from (or why not: a store not migrated yet, an export
    without them -- the run goes on with every break ``open``)."""
    try:
        if config.store_url is not None:
            reader = extract.JdbcReader(spark, to_jdbc(config.store_url), 1)
            rows = reader.query(f"SELECT {breaks.STATUS_SELECT} FROM {breaks.STATUS_TABLE}")
            where = "the store"
        else:
            assert config.parquet is not None
            rows = extract.exported_statuses(spark, config.parquet)
            where = "the export"
        found = {str(r["break_id"]): r.asDict() for r in rows.collect()}
    except Exception as exc:  # the report says so; the verdict does not depend on them
        return {}, f"not read ({type(exc).__name__}): every break counts as open"
    return found, f"{where}: {len(found)} status(es)"
