"""Test your handlers without a server: the real broker code in your process.

::

    from halfmq.testing import InProcessBroker

    def test_transfer():
        with InProcessBroker() as broker:                 # sync face
            broker.create_topic("transfers")
            producer = TransactionProducer("bob-bank", brokers=[broker.url],
                                           transport=broker.transport)
            ...

    async def test_transfer_async():
        async with InProcessBroker() as broker:           # async face
            producer = AsyncTransactionProducer("bob-bank", brokers=[broker.url],
                                                transport=broker.async_transport)

The broker is ``broker_service.app.build_app`` on a fresh SQLite database with short
check-back times (``transaction_timeout_seconds=1``, ``transaction_check_interval_seconds=0.5``;
override any setting as a keyword).  The database is a file in a private temporary directory,
removed on exit: SQLite's shared-cache in-memory databases answer concurrent readers and the
writer with SQLITE_LOCKED, which ``busy_timeout`` does not retry, so the broker's separate reader
and writer engines need a real file (WAL) to run side by side.

With the ACL on (``InProcessBroker(acl_file=..., credentials=("operator", "..."))``), the
broker's own helpers (:meth:`~InProcessBroker.client`, :meth:`~InProcessBroker.create_topic`...)
sign with ``credentials`` (default: ``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``, or unsigned);
each producer or consumer signs with its own: the transports only carry what a client signed.

The async face calls the app through ``httpx.ASGITransport`` in the test's own event loop.  httpx
has no sync ASGI transport, so the sync face runs the app's lifespan and requests on an event loop
in one dedicated thread and bridges each request to it (:class:`SyncASGIBridge`).  This bridge is
for the TEST broker only: the framework's sync clients never run an event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
from asgi_lifespan import LifespanManager

from framework.signing import CredentialsLike, HalfmqAuth, resolve_credentials

T = TypeVar("T")

FAST_CHECKS: dict[str, Any] = {
    "transaction_timeout_seconds": 1.0,
    "transaction_check_interval_seconds": 0.5,
    "producer_expiry_seconds": 30.0,
    "check_timeout_seconds": 5.0,
}


REQUEST_LIMIT_SECONDS = 120.0  # a bridged request never waits forever (long-polls are shorter)
_TEMPLATE: list[Path] = []
_TEMPLATE_LOCK = threading.Lock()


def _migrated_template() -> Path:
    """An empty SQLite store at the current schema, migrated once per process and copied for each
    test broker (running the migrations is most of a test broker's start-up)."""
    from broker_service.store import migrate

    with _TEMPLATE_LOCK:
        if not _TEMPLATE:
            folder = Path(tempfile.mkdtemp(prefix="halfmq-template-"))
            atexit.register(shutil.rmtree, folder, True)
            path = folder / "template.db"
            migrate.upgrade(f"sqlite:///{path}")
            _TEMPLATE.append(path)
        return _TEMPLATE[0]


class SyncASGIBridge(httpx.BaseTransport):
    """A sync httpx transport that runs each request on ``loop`` (another thread's event loop)."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.inner = httpx.ASGITransport(app=app)
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()

    def cancel_pending(self) -> None:
        """End the requests still waiting (a long poll a client shut down without waiting for):
        they fail as a dropped connection would, instead of outliving the broker."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        content = request.read()
        forwarded = httpx.Request(
            request.method, request.url, headers=request.headers, content=content
        )

        async def run() -> tuple[int, httpx.Headers, bytes]:
            response = await self.inner.handle_async_request(forwarded)
            body = await response.aread()
            return response.status_code, response.headers, body

        if self.loop.is_closed() or not self.loop.is_running():
            raise httpx.ConnectError("the in-process test broker is stopped", request=request)
        future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        with self._lock:
            self._pending.add(future)
        try:
            status, headers, body = future.result(REQUEST_LIMIT_SECONDS)
        except TimeoutError as exc:
            future.cancel()
            raise httpx.ReadTimeout(
                "the in-process test broker did not answer", request=request
            ) from exc
        except concurrent.futures.CancelledError as exc:
            raise httpx.ReadError("the in-process test broker stopped", request=request) from exc
        finally:
            with self._lock:
                self._pending.discard(future)
        return httpx.Response(status, headers=headers, content=body, request=request)


class InProcessBroker:
    """The real broker app on a private SQLite database, reachable through httpx transports.
    ``settings`` are the broker's (``BrokerSettings`` keywords); ``credentials`` sign the requests
    of this object's own clients."""

    url = "http://halfmq-test-broker"

    def __init__(self, *, credentials: CredentialsLike = None, **settings: Any) -> None:
        from broker_service.settings import BrokerSettings

        self.credentials = resolve_credentials(credentials)
        self._dir = Path(tempfile.mkdtemp(prefix="halfmq-test-"))
        values = {**FAST_CHECKS, **settings}
        values.setdefault("database_url", f"sqlite:///{self._dir / f'{uuid.uuid4().hex}.db'}")
        self.settings = BrokerSettings(**values)
        self._manager: LifespanManager | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._transport: SyncASGIBridge | None = None
        self._async_transport: httpx.ASGITransport | None = None

    def _app(self) -> Any:
        from broker_service.app import build_app

        url = self.settings.database_url
        own_file = self._dir / url.rsplit("/", 1)[-1]
        if url.startswith("sqlite:///") and url.endswith(own_file.name):
            shutil.copyfile(_migrated_template(), own_file)
        else:
            from broker_service.store import migrate

            migrate.upgrade(url)
        return build_app(self.settings)

    # -- async face --------------------------------------------------------------------------------

    async def __aenter__(self) -> InProcessBroker:
        self._manager = LifespanManager(self._app(), startup_timeout=30, shutdown_timeout=30)
        await self._manager.__aenter__()
        self._async_transport = httpx.ASGITransport(app=self._manager.app)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._manager is not None:
                await self._manager.__aexit__(exc_type, exc, tb)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def async_transport(self) -> httpx.ASGITransport:
        if self._async_transport is None:
            raise RuntimeError("enter the broker with `async with` for its async transport")
        return self._async_transport

    def async_client(self) -> httpx.AsyncClient:
        """A raw client on the broker (for assertions on its REST answers), signing with
        ``credentials``."""
        return httpx.AsyncClient(
            transport=self.async_transport, base_url=self.url, auth=self._auth()
        )

    # -- sync face ---------------------------------------------------------------------------------

    def __enter__(self) -> InProcessBroker:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def serve() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="halfmq-test-broker", daemon=True)
        self._thread.start()
        ready.wait()
        app = self._app()

        async def begin() -> LifespanManager:  # LifespanManager must be built on its loop
            manager = LifespanManager(app, startup_timeout=30, shutdown_timeout=30)
            await manager.__aenter__()
            return manager

        self._manager = self._on_loop(begin())
        self._transport = SyncASGIBridge(self._manager.app, loop)
        return self

    def __exit__(self, *exc_info: object) -> None:  # stopped whatever the exception
        try:
            if self._transport is not None:
                self._transport.cancel_pending()
            if self._manager is not None and self._loop is not None:
                self._on_loop(self._manager.__aexit__(None, None, None))
        finally:
            if self._loop is not None and self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
                self._loop.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    @property
    def transport(self) -> SyncASGIBridge:
        if self._transport is None:
            raise RuntimeError("enter the broker with `with` for its sync transport")
        return self._transport

    def client(self) -> httpx.Client:
        """A raw client on the broker, signing with ``credentials``."""
        return httpx.Client(transport=self.transport, base_url=self.url, auth=self._auth())

    def _auth(self) -> HalfmqAuth | None:
        return None if self.credentials is None else HalfmqAuth(self.credentials)

    def create_topic(self, name: str = "transfers", queues: int = 4) -> str:
        with self.client() as client:
            client.post("/v1/topics", json={"name": name, "queues": queues}).raise_for_status()
        return name

    async def acreate_topic(self, name: str = "transfers", queues: int = 4) -> str:
        async with self.async_client() as client:
            response = await client.post("/v1/topics", json={"name": name, "queues": queues})
            response.raise_for_status()
        return name


TestBroker = InProcessBroker  # FastStream's name for the same idea
