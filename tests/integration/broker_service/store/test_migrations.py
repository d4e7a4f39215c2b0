"""The Alembic migrations build exactly the schema the code declares, on both stores, and a broker
facing an older schema refuses to serve."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from broker_service.store import migrate
from broker_service.store.schema import metadata
from tests.support import BrokerProcess, free_port, wait_until


def test_migrations_match_the_declared_schema(store_url: str) -> None:
    migrate.upgrade(store_url)
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            differences = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_downgrade_to_base_and_up_again(store_url: str) -> None:
    migrate.upgrade(store_url)
    engine = create_engine(store_url)
    try:
        with engine.begin() as conn:
            config = migrate.alembic_config(store_url)
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
        assert migrate.schema_status(engine).current is None
    finally:
        engine.dispose()
    migrate.upgrade(store_url)
    engine = create_engine(store_url)
    try:
        status = migrate.schema_status(engine)
    finally:
        engine.dispose()
    assert status.is_current


@pytest.mark.slow
def test_a_broker_on_an_old_schema_refuses_and_names_the_fix(
    store_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(store_url, "0001")
    refused = BrokerProcess(store_url, free_port(), tmp_path / "broker.log")
    refused.start_unready()
    try:
        answer: httpx.Response | None = None

        def refusing() -> bool:
            nonlocal answer
            try:
                answer = httpx.get(f"{refused.url}/readyz", timeout=2)
            except httpx.HTTPError:
                return False
            return answer.status_code == 503

        wait_until(refusing, 60, "the broker to answer /readyz")
        assert answer is not None
        assert answer.json()["error"]["code"] == "NOT_READY"
        assert "halfmq db upgrade" in answer.json()["error"]["message"]
        sent = httpx.post(f"{refused.url}/v1/topics", json={"name": "t"}, timeout=5)
        assert sent.status_code == 503
        assert "halfmq db upgrade" in (tmp_path / "broker.log").read_text()
    finally:
        refused.stop()
    migrate.upgrade(store_url)
    broker = BrokerProcess(store_url, free_port(), tmp_path / "broker-after.log")
    broker.start()
    try:
        assert httpx.get(f"{broker.url}/readyz").status_code == 200
    finally:
        broker.stop()


def test_serve_creates_and_migrates_a_brand_new_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"  # its directory must exist (issue 29, item 8)
    broker = BrokerProcess(url, free_port(), tmp_path / "broker.log")
    broker.start()
    try:
        ready = httpx.get(f"{broker.url}/readyz")
        assert ready.status_code == 200
        created = httpx.post(f"{broker.url}/v1/topics", json={"name": "t"})
        assert created.status_code == 201
    finally:
        broker.stop()
