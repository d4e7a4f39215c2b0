"""Fixtures of the store tests that build their own PostgreSQL cluster (``drills.pg_cluster``: the
machine's binaries, free loopback ports, never the machine's own cluster)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from drills.pg_cluster import PgCluster, missing_tools


def require_cluster_tools() -> None:
    """Skip the test when a cluster cannot be built here -- fail it under ``CI=true``."""
    missing = missing_tools()
    if missing:
        message = f"a PostgreSQL cluster cannot be built here: missing {'; '.join(missing)}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def cluster_tools() -> None:
    """For a test that builds its cluster itself: skipped (failed under CI) without the tools."""
    require_cluster_tools()


@pytest.fixture
def cluster(cluster_tools: None) -> Iterator[PgCluster]:
    """A primary and its synchronous standby, stopped and removed afterwards."""
    with PgCluster.create() as made:
        yield made
