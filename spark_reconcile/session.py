"""The SparkSession of a run: ``local[*]`` unless told otherwise -- a cluster's master
(``spark://HOST:7077``) or a Spark Connect server (``sc://HOST:15002``) -- with the JDBC drivers
on its classpath, UTC, and a master / memory left alone when ``spark-submit`` already chose them.

The job only uses the DataFrame API, so one code path serves both kinds of session: a classic one
(this process runs the driver's JVM) and a Connect client (the server runs it; no JVM here)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

UNDER_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"  # set when spark-submit started the JVM for us
CONNECT_PORT = 15002  # Spark Connect's default
REACH_WITHIN_S = 10.0


class UnreachableServerError(ConnectionError):
    """Nothing answers at the Spark Connect server's address."""


def build_session(
    *,
    master: str | None,
    jars: Sequence[str],
    shuffle_partitions: int,
    driver_memory: str | None = None,
    remote: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
) -> SparkSession:
    """A classic session, or a Spark Connect client when ``remote`` is given.  ``conf`` (the
    command's ``--conf``) comes last, so it overrides the job's own settings."""
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        # The view the checks share is cached once and scanned a few times: compressing it
        # cost more CPU than the scans saved (bench/reconcile/README.md).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # A batch job: nobody watches its web UI, whose server and listeners cost start-up time
        # and driver work on every task (turn it on with --conf spark.ui.enabled=true).
        "spark.ui.enabled": "false",
        # The pass over the messages groups them by transaction id; a transaction's few rows sit
        # in different files, so a partial aggregation before the shuffle shrinks nothing and
        # cost ~2/3 of that pass's CPU at 10M. The job's other aggregations are small.
        "spark.sql.execution.bypassPartialAggregation": "true",
        # A bucketed export (``buckets.py``) is read bucket by bucket wherever its table is
        # scanned: left to decide, Spark drops the bucketing under the broadcast join of the
        # messages with their parked copies, and the view's exchange comes back.
        "spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
        **dict(conf),
    }
    if remote:
        return _connect_session(remote, jars, settings)
    return _classic_session(master, jars, driver_memory, settings)


def _classic_session(
    master: str | None, jars: Sequence[str], driver_memory: str | None, settings: Mapping[str, str]
) -> SparkSession:
    builder = SparkSession.builder.appName("halfmq-reconcile")
    under_submit = UNDER_SUBMIT_ENV in os.environ
    if master or not under_submit:
        builder = builder.master(master or "local[*]")
    if driver_memory and not under_submit:
        builder = builder.config("spark.driver.memory", driver_memory)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _connect_session(remote: str, jars: Sequence[str], settings: Mapping[str, str]) -> SparkSession:
    """A Spark Connect client of the server at ``remote``.  The driver jars are uploaded into the
    session (``addArtifacts``): the server loads the JDBC drivers from them, on its executors too,
    so neither needs them installed.  Only SQL settings apply to a running server; the others
    (memory, cores) are the server's own and are ignored."""
    check_reachable(remote)
    builder = SparkSession.builder.remote(remote).appName("halfmq-reconcile")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if jars:
        spark.addArtifacts(*jars)
    return spark


def check_reachable(remote: str, within_s: float = REACH_WITHIN_S) -> None:
    """Fails fast when nothing listens at ``sc://HOST:PORT``: the Connect client would retry its
    first call for many minutes, and a nightly run must page someone instead of hanging."""
    address = urlsplit(remote.split(";", 1)[0])
    host, port = address.hostname or "localhost", address.port or CONNECT_PORT
    try:
        socket.create_connection((host, port), timeout=within_s).close()
    except OSError as exc:
        raise UnreachableServerError(
            f"no Spark Connect server answers at {host}:{port} ({exc})"
        ) from exc


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client: it has no SparkContext and no JVM to ask."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def release(spark: SparkSession) -> None:
    """Ends a Connect client's server-side session (its cached frames, its uploaded jars) rather
    than leaving it to the server's idle timeout; a classic session ends with this process."""
    if is_connect(spark):
        spark.stop()
