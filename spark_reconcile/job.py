"""One reconciliation run: extract, detect, load, report."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from sqlalchemy.engine import make_url

from spark_reconcile import extract, load
from spark_reconcile.config import ReconcileConfig
from spark_reconcile.detect import detect
from spark_reconcile.jdbc import MissingDriverError, driver_for, find_jars
from spark_reconcile.report import write_report
from spark_reconcile.session import build_session, is_connect
from spark_reconcile.summary import Summary

ROWS_PER_KIND = 1000  # the report lists every anomaly up to this many of a kind (Parquet: all)
TREND_DAYS = 30


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


def run(config: ReconcileConfig, spark: SparkSession, report_dir: Path | None = None) -> Summary:
    window = config.window
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
    kept: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        kept.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return kept[-1]

    try:
        found = keep(
            detect(
                store,
                ledger,
                window=window,
                mapping=config.key_mapping,
                thresholds=config.thresholds,
                keep=keep,
            ).repartition("kind")
        )
        load.write_anomalies(found, config.out, config.day)
        counts, picked = load.counts_and_samples(found, ROWS_PER_KIND)
    finally:
        for df in kept:
            df.unpersist()
    load.write_counts(spark, counts, config.out, config.day)
    summary = Summary(
        day=config.day,
        source=_source(config),
        window=dataclasses.asdict(window),
        counts=counts,
        rows=picked,
        trend=load.read_trend(spark, config.out, config.day, TREND_DAYS),
        ledgers=tuple(s.name for s in config.ledgers),
        console_url=config.console_url,
    )
    directory = report_dir or Path(config.out) / "report" / f"date={config.day.isoformat()}"
    write_report(summary, directory)
    return summary
