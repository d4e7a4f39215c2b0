"""A broker whose store is not ready when it starts (its schema behind the migrations, as while
an operator upgrades it; or its PostgreSQL without a primary) still enforces its ACL file, and
publishes it by itself once the store is ready -- it used to skip the ACL's start altogether, so
the file was never published and never reloaded.  And the store says it is behind once, not at
every readiness probe and presence beat."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from broker_service.acl.file import dump_acl
from broker_service.acl.runtime import AclRuntime
from broker_service.domain.clock import now_ms
from broker_service.domain.errors import NotReady
from broker_service.schedulers.acl_reload import AclReloadScheduler
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.sql_store import SqlStore
from tests.support import ACL


@pytest.fixture
def behind(tmp_path: Path) -> str:
    """A SQLite store that exists (so the broker does not create it) but was never migrated."""
    path = tmp_path / "broker.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE operators_notes (note TEXT)")
    return f"sqlite:///{path}"


async def test_the_file_is_enforced_at_once_and_published_once_the_store_is_ready(
    behind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl_path = tmp_path / "acl.yml"
    acl_path.write_text(ACL)
    store = SqlStore(BrokerSettings(database_url=behind))
    store.open()
    assert not store.schema_current
    runtime = AclRuntime(
        acl_path, store, now_ms, broker_id="b1", window_ms=300_000, reload_seconds=3600
    )
    try:
        with caplog.at_level(logging.WARNING, logger="halfmq.acl"):
            await runtime.start()  # refused before: the store's NOT_READY ended the start
        assert runtime.config.secret_for("bob-bank-key") == "bob-bank-secret"  # enforced
        assert "not published yet" in caplog.text

        with pytest.raises(NotReady):  # still not ready
            await runtime.reload()
        assert runtime.config.secret_for("bob-bank-key") == "bob-bank-secret"
        reloads = AclReloadScheduler(runtime)  # what the broker runs: says so once, goes on
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="halfmq.acl"):
            for _ in range(3):
                await reloads.run_round()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert said[0].startswith("reloading the ACL (the enforced version stays) failed: ")

        migrate.upgrade(behind)  # the operator's `halfmq db upgrade`
        assert store.check_schema().ready
        assert await store.read(lambda tx: tx.latest_acl()) is None
        with caplog.at_level(logging.INFO, logger="halfmq.acl"):
            await reloads.run_round()
        assert "works again after 3 failed rounds" in caplog.text
        latest = await store.read(lambda tx: tx.latest_acl())
        assert latest is not None
        _, version, content = latest
        assert version == runtime.config.version
        assert content == ACL
        assert f"ACL version {version} published by b1" in caplog.text
    finally:
        store.close()


def test_a_store_behind_says_so_once_however_often_it_is_probed(
    behind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqlStore(BrokerSettings(database_url=behind))
    with caplog.at_level(logging.ERROR, logger="halfmq.store"):
        store.open()
        for _ in range(5):  # readiness probes, presence beats
            assert not store.check_schema().ready
    try:
        refusals = [r for r in caplog.records if "refusing to serve" in r.getMessage()]
        assert len(refusals) == 1
    finally:
        store.close()


@pytest.fixture
def waiting(behind: str, tmp_path: Path) -> Iterator[tuple[SqlStore, AclRuntime]]:
    """A broker's store, not ready yet, and its ACL runtime over the test's file (not started)."""
    acl_path = tmp_path / "acl.yml"
    acl_path.write_text(ACL)
    store = SqlStore(BrokerSettings(database_url=behind))
    store.open()
    runtime = AclRuntime(
        acl_path, store, now_ms, broker_id="b1", window_ms=300_000, reload_seconds=3600
    )
    yield store, runtime
    store.close()


async def test_a_version_published_since_the_start_is_not_overridden_by_the_late_publish(
    behind: str, waiting: tuple[SqlStore, AclRuntime]
) -> None:
    """Another broker (or `halfmq acl`) revokes a key while this broker waits for its store: once
    the store is ready, this broker enforces that newer version rather than publishing its file
    over it -- the revoked key stays revoked on every broker."""
    store, runtime = waiting
    await runtime.start()
    migrate.upgrade(behind)
    assert store.check_schema().ready
    revoked = runtime.config.without_account("bob-bank-key")
    content = dump_acl(revoked)
    at = now_ms()
    await store.write(lambda tx: tx.publish_acl(revoked.version, content, at, "b2"))
    await runtime.reload()
    latest = await store.read(lambda tx: tx.latest_acl())
    assert latest is not None
    assert latest[1] == revoked.version
    assert runtime.config.secret_for("bob-bank-key") is None


async def test_a_change_made_while_the_store_was_not_ready_is_published_once_it_is(
    behind: str, waiting: tuple[SqlStore, AclRuntime]
) -> None:
    """`halfmq acl` on a broker whose store is not ready writes the file, and the publish fails;
    the next reload that finds the store ready publishes the file as changed, not as started."""
    store, runtime = waiting
    await runtime.start()
    with pytest.raises(NotReady):
        await runtime.update(lambda config: config.without_account("teller-key"))
    assert "teller-key" not in runtime.path.read_text()
    migrate.upgrade(behind)
    assert store.check_schema().ready
    await runtime.reload()
    latest = await store.read(lambda tx: tx.latest_acl())
    assert latest is not None
    assert "teller-key" not in latest[2]
    assert "smith-bank-key" in latest[2]
    assert runtime.config.secret_for("teller-key") is None


class FailingWrites:
    """The store, but its next ``failures`` writes are refused (a primary lost between them)."""

    def __init__(self, store: SqlStore, failures: int) -> None:
        self.store, self.failures = store, failures

    async def read(self, unit: Callable[[Any], Any]) -> Any:
        return await self.store.read(unit)

    async def write(self, unit: Callable[[Any], Any], *, nonce: Any = None) -> Any:
        if self.failures:
            self.failures -= 1
            raise NotReady("the store failed: lost its primary", code="STORE_UNAVAILABLE")
        return await self.store.write(unit, nonce=nonce)


async def test_a_late_publish_that_fails_is_tried_again_by_the_next_reload(
    behind: str, waiting: tuple[SqlStore, AclRuntime]
) -> None:
    store, runtime = waiting
    await runtime.start()
    migrate.upgrade(behind)
    assert store.check_schema().ready
    runtime.store = cast(Any, FailingWrites(store, failures=1))
    with pytest.raises(NotReady):
        await runtime.reload()
    await runtime.reload()
    latest = await store.read(lambda tx: tx.latest_acl())
    assert latest is not None
    assert latest[2] == ACL
