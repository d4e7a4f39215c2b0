"""Fixtures shared by every test: real stores (a SQLite file, the machine's PostgreSQL) and brokers;
and the rule that splits a test run on several stores between the tiers (docs/testing.md).

PostgreSQL is at ``HALFMQ_TEST_PG`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``).
A test that asks for a migrated store gets the session's migrated schema, emptied for it
(tests/reused_schema.py); any other gets its own empty schema (or, where it needs one, its own
database), dropped afterwards.  When PostgreSQL is unreachable the test is skipped -- except under
``CI=true``, where it fails.

Under pytest-xdist the longest tests (``LONGEST``) are handed out first, a share to each worker
(``_longest_first``), and every short-lived JVM Spark starts for a test gets quick-start options
(``QUICK_JVM``).
"""

from __future__ import annotations

import gc
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from tests.reused_schema import ReusedSchema
from tests.support import ACL, PG_BASE_URL, BrokerApp, BrokerProcess, free_port

IN_CI = os.environ.get("CI", "").lower() == "true"
TESTS = Path(__file__).parent
# The fixtures whose parameter names the store a test runs on.
STORE_FIXTURES = ("store", "any_store", "store_url")
SQL_STORES = ("sqlite", "postgresql")
# The tests that take longest, longest first (pytest --durations in three workers): each entry is
# a node id or its prefix, and the tests it names stay together (a module named whole keeps its
# module-scoped fixtures).  A test missing here merely starts in its tier's place.
LONGEST = (
    "tests/acceptance/spark_reconcile/test_reconcile_breaks.py",
    "tests/acceptance/spark_reconcile/test_reconcile_cluster.py",
    "tests/acceptance/spark_reconcile/test_reconcile_job.py::test_parquet_export",
    "tests/acceptance/demo_bank/test_rocketmq_clients.py::test_demo_on_rocketmq_clients",
    "tests/acceptance/demo_bank/test_reconcile.py::test_demo_reconciles_sqlite",
    "tests/acceptance/spark_reconcile/test_reconcile_buckets.py",
    "tests/acceptance/broker_service/schedulers/test_checkback.py::test_two_brokers_on_postgresql",
    "tests/acceptance/spark_reconcile/test_reconcile_job.py::test_sqlite_store_and_banks",
    "tests/acceptance/spark_reconcile/test_reconcile_job.py::test_postgres_store_and_banks",
)
# A short-lived JVM Spark starts for a test -- a ``halfmq reconcile`` that a test or the demo runs
# -- lives a minute or two, on a few hundred rows: the C1 compiler alone and the serial collector
# leave the cores to the tests, where the C2 compiler's threads took them (``spark-submit`` adds
# SPARK_SUBMIT_OPTS to the driver's command line).  A worker's one long-lived local session keeps
# the JVM's defaults (tests/acceptance/spark_reconcile/conftest.py).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _store_of(item: pytest.Item) -> object:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((params[name] for name in STORE_FIXTURES if name in params), None)


def _tier_of(item: pytest.Item) -> tuple[str, Path]:
    """The tier of a test (unit, integration, acceptance) and its module's path within it."""
    relative = item.path.relative_to(TESTS)
    return relative.parts[0], Path(*relative.parts[1:])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A domain test written for every store runs on the in-memory store in the unit tier (no
    database) and on SQLite and PostgreSQL in the integration tier, whose module of the same path
    imports it (a test of such a module that takes no store runs in the unit tier alone): each
    parameter runs once, in its tier.  A unit module with SQL parameters and no
    such module is an error, not a silent loss."""
    kept, dropped = [], []
    for item in items:
        tier, module = _tier_of(item)
        store = _store_of(item)
        if tier == "unit" and store in SQL_STORES:
            if not (TESTS / "integration" / module).exists():
                raise pytest.UsageError(
                    f"{item.nodeid} runs on {store} in the unit tier: add "
                    f"tests/integration/{module} importing its tests"
                )
            dropped.append(item)
        elif (
            tier == "integration" and store not in SQL_STORES and (TESTS / "unit" / module).exists()
        ):
            dropped.append(item)  # on memory, or on no store: the unit tier runs it
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers > 1:
        items[:] = _longest_first(items, workers)


def _longest_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered so that each of ``workers`` starts with its share of ``LONGEST``.

    ``--dist worksteal`` first sends each worker a contiguous share of the run (the first
    ``len // workers`` tests, then an even share of the rest, ...), then lets an idle worker take
    half of a busy one's queue, from its end.  So the longest tests go to the heads of those shares,
    dealt in turn (snake order: 1-2-3-3-2-1, ...), and none of them waits behind the short ones."""
    blocks: list[list[pytest.Item]] = [[] for _ in LONGEST]
    rest: list[pytest.Item] = []
    for item in items:
        rank = next((n for n, prefix in enumerate(LONGEST) if item.nodeid.startswith(prefix)), None)
        (rest if rank is None else blocks[rank]).append(item)
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for n, block in enumerate(b for b in blocks if b):
        turn, place = divmod(n, workers)
        heads[place if turn % 2 == 0 else workers - 1 - place].extend(block)
    ordered: list[pytest.Item] = []
    left = len(items)
    for n, head in enumerate(heads):
        share = left // (workers - n)  # what worksteal first sends the n-th worker
        left -= share
        take = max(0, share - len(head))
        ordered += head + rest[:take]
        rest = rest[take:]
    return ordered + rest


def pytest_configure(config: pytest.Config) -> None:
    """Quick-start JVMs for Spark (``QUICK_JVM``), unless the environment chose otherwise."""
    os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)


def _pg_or_skip() -> None:
    try:
        engine = create_engine(PG_BASE_URL)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except OperationalError as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI and unreachable: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")


@pytest.fixture(scope="module", autouse=True)
def _collect_garbage_per_module() -> Iterator[None]:
    """Collect garbage as each module ends.

    Something leaked (an engine never disposed, a socket never closed) warns only when the collector
    reaches it, and the warning fails whichever test is running then.  Collecting here pins it on the
    module that leaked it.
    """
    yield
    gc.collect()


@contextmanager
def _made_and_dropped(make: str, drop: str) -> Iterator[None]:
    """Runs ``make`` on the test PostgreSQL for a test, and ``drop`` when it is done."""
    _pg_or_skip()
    engine = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(make))
    try:
        yield
    finally:
        with engine.connect() as conn:
            conn.execute(text(drop))
        engine.dispose()


@contextmanager
def _pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, as a URL whose search_path points at it; dropped after."""
    schema = f"halfmq_t_{uuid.uuid4().hex[:12]}"
    with _made_and_dropped(f'CREATE SCHEMA "{schema}"', f'DROP SCHEMA "{schema}" CASCADE'):
        yield f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, as a URL whose search_path points at it."""
    with _pg_schema() as url:
        yield url


@pytest.fixture
def pg_database_url() -> Iterator[str]:
    """A fresh PostgreSQL database of the test's own, dropped afterwards: for a test that needs
    what a schema does not isolate -- VACUUM's horizon, which another test's open snapshot in the
    same database holds back (dead rows it may still see are kept), but one in another database
    does not."""
    name = f"halfmq_t_{uuid.uuid4().hex[:12]}"
    with _made_and_dropped(f'CREATE DATABASE "{name}"', f'DROP DATABASE "{name}" WITH (FORCE)'):
        yield make_url(PG_BASE_URL).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture(scope="session")
def _reused_pg_schema() -> Iterator[ReusedSchema]:
    """The session's (the worker's) migrated PostgreSQL schema, made when a test first asks."""
    schema = ReusedSchema(PG_BASE_URL)
    yield schema
    schema.close()


@pytest.fixture
def pg_migrated_url(_reused_pg_schema: ReusedSchema) -> str:
    """A migrated PostgreSQL schema holding no row: the session's, emptied for this test."""
    _pg_or_skip()
    return _reused_pg_schema.empty()


def sql_store_fixture(kind: str, request: pytest.FixtureRequest) -> str:
    """The fixture giving a test's store of ``kind``: on PostgreSQL, the session's migrated schema
    emptied when the test asks for a migrated store, a fresh empty schema when it migrates (or
    not) itself."""
    if kind == "sqlite":
        return "sqlite_url"
    return "pg_migrated_url" if "migrated_url" in request.fixturenames else "pg_url"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store-touching test runs on both stores."""
    url: str = request.getfixturevalue(sql_store_fixture(request.param, request))
    return url


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated by Alembic per session: each test's migrated SQLite store is a
    copy of it (the migrations themselves are tested in tests/integration/broker_service/store)."""
    from broker_service.store import migrate

    path = tmp_path_factory.mktemp("migrated") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


def migrated(store_url: str, request: pytest.FixtureRequest) -> str:
    """``store_url`` migrated: a copy of the session's migrated SQLite file, the session's
    PostgreSQL schema as it is (``pg_migrated_url``), or any other URL migrated by Alembic."""
    from broker_service.store import migrate

    if store_url.startswith("sqlite:///"):
        template: Path = request.getfixturevalue("_migrated_sqlite")
        shutil.copyfile(template, store_url.removeprefix("sqlite:///"))
    elif store_url != request.getfixturevalue("_reused_pg_schema").url:
        migrate.upgrade(store_url)
    return store_url


@pytest.fixture
def migrated_url(store_url: str, request: pytest.FixtureRequest) -> str:
    return migrated(store_url, request)


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    """The real broker app in this process, over an httpx ASGI transport."""
    async with BrokerApp.start(database_url=migrated_url) as running:
        yield running


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    """``tests.support.ACL`` written as ``plain_acl.yml`` (a test may rewrite it: hot reload)."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return path


@pytest.fixture
async def acl_app(migrated_url: str, acl_file: Path) -> AsyncIterator[BrokerApp]:
    """The real broker app in this process with the ACL on (``acl_file``); ``broker.client``
    is unsigned, ``tests.support.signed`` gives a signed client."""
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as running:
        yield running


@pytest.fixture
def broker_process(migrated_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    """The real broker in its own process, over real HTTP on 127.0.0.1."""
    process = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def shared_broker_process(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], BrokerProcess]]:
    """The broker processes a module's tests share: ``shared_broker_process("sqlite")`` (or
    ``"postgresql"``) is one broker process per store for the whole module, on a migrated store
    of its own, started when a test first asks for it.

    For tests that need *a* broker process, not a fresh one: each test names its own topics,
    groups and messages (``unique``), since the others' stay in the store.  A test that stops,
    kills or restarts its broker, or needs a store state of its own, takes ``broker_process``."""
    started: dict[str, BrokerProcess] = {}
    with ExitStack() as stack:

        def process(kind: str) -> BrokerProcess:
            if kind not in started:
                directory = tmp_path_factory.mktemp(f"shared-broker-{kind}")
                url = stack.enter_context(_module_store(kind, directory, request))
                running = BrokerProcess(url, free_port(), directory / "broker.log")
                running.start()
                stack.callback(running.stop)  # before its store goes (the stack unwinds LIFO)
                started[kind] = running
            return started[kind]

        yield process


@contextmanager
def _module_store(kind: str, directory: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated store of ``kind`` for a module's shared broker: a copy of the session's migrated
    SQLite file in ``directory``, or a PostgreSQL schema of its own, migrated, dropped after."""
    if kind == "sqlite":
        path = directory / "broker.db"
        shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), path)
        yield f"sqlite:///{path}"
        return
    from broker_service.store import migrate

    with _pg_schema() as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names of this test's own, for a broker other tests share: ``unique("t")`` is ``"t-"`` and a
    suffix of this test's, the same for every name it asks for."""
    suffix = uuid.uuid4().hex[:10]
    return lambda name: f"{name}-{suffix}"
