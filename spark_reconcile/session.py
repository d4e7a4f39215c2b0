"""The SparkSession of a run: ``local[*]`` unless told otherwise, the JDBC drivers on its
classpath, UTC, and a master / memory left alone when ``spark-submit`` already chose them."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import SparkSession

UNDER_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"  # set when spark-submit started the JVM for us


def build_session(
    *,
    master: str | None,
    jars: Sequence[str],
    shuffle_partitions: int,
    driver_memory: str | None = None,
) -> SparkSession:
    builder = SparkSession.builder.appName("halfmq-reconcile")
    under_submit = UNDER_SUBMIT_ENV in os.environ
    if master or not under_submit:
        builder = builder.master(master or "local[*]")
    if driver_memory and not under_submit:
        builder = builder.config("spark.driver.memory", driver_memory)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    return (
        builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        # The view the checks share is cached once and scanned a few times: compressing it
        # cost more CPU than the scans saved (bench/reconcile/README.md).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .getOrCreate()
    )
