"""Fixtures of the reconciliation tests: one local[2] SparkSession for the whole session, builders
of tiny input frames, and an isolated PostgreSQL schema (skipped locally when PostgreSQL or
pyspark is missing, failed when CI=true)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from reconcile_helpers import unavailable

from tests.conftest import QUICK_JVM

PG_URL = os.environ.get("HALFMQ_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        unavailable('pyspark is not installed: pip install -e ".[spark]"')
    from spark_reconcile.jdbc import DRIVERS, find_jars

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("halfmq-reconcile-tests")
        # One JVM runs every reconciliation test of a worker, and the job runs its report's small
        # jobs side by side: Spark's default 1g of driver heap ran out once in a full suite (the
        # job's own default is 4g, spark_reconcile.job.session_for).
        .config("spark.driver.memory", "2g")
        .config("spark.jars", ",".join(find_jars(DRIVERS.values())))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    # This JVM lives the whole run and runs every in-process job of the worker: it keeps the JVM's
    # own compilers, not the quick-start options (tests/conftest.py's QUICK_JVM) given to the
    # short-lived ones -- with C1 alone the in-process jobs were no faster.
    with pytest.MonkeyPatch.context() as env:
        if os.environ.get("SPARK_SUBMIT_OPTS") == QUICK_JVM:
            env.delenv("SPARK_SUBMIT_OPTS")
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def frame(spark: Any) -> Callable[[str, list[tuple[Any, ...]]], Any]:
    """``frame(ddl, rows)``: a tiny DataFrame built in the test."""

    def build(ddl: str, rows: list[tuple[Any, ...]]) -> Any:
        return spark.createDataFrame(rows, ddl)

    return build


@pytest.fixture
def pg_schemas() -> Iterator[Callable[[], str]]:
    """Makes fresh schemas in the test database on demand; returns for each a SQLAlchemy URL whose
    search_path is that schema.  All are dropped afterwards."""
    import sqlalchemy as sa

    admin = sa.create_engine(PG_URL)
    made: list[str] = []

    def make() -> str:
        name = f"recon_{secrets.token_hex(4)}"
        try:
            with admin.begin() as conn:
                conn.execute(sa.text(f"CREATE SCHEMA {name}"))
        except sa.exc.OperationalError as exc:
            unavailable(f"PostgreSQL is not reachable at {PG_URL}: {exc.orig}")
        made.append(name)
        return f"{PG_URL}?options=-csearch_path%3D{name}"

    try:
        yield make
    finally:
        with admin.begin() as conn:
            for name in made:
                conn.execute(sa.text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()
