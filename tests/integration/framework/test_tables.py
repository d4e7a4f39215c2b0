"""The framework's tables ship for users' migrations: the Alembic helpers build exactly the
declared tables, on a real SQLite file and the real PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import create_engine, inspect

from framework import tables


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'user.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def test_alembic_helpers_match_the_metadata(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        context = MigrationContext.configure(conn)
        with Operations.context(context):
            tables.alembic_upgrade()
    with engine.begin() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, tables.metadata) == []
    assert {"halfmq_local_transaction_log", "halfmq_inbox"} <= set(
        inspect(engine).get_table_names()
    )
    with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
        tables.alembic_downgrade()
    assert not {"halfmq_local_transaction_log", "halfmq_inbox"} & set(
        inspect(engine).get_table_names()
    )
    engine.dispose()
