"""The ACL a running broker enforces: its file, hot reload, the version shared through the store,
and replay protection.

* At start the file is read (a malformed one refuses the start, naming the line) and published to
  the store as the newest version.  A store not ready yet (its schema behind the migrations, its
  PostgreSQL without a primary) does not hold the start: the file is enforced meanwhile, and the
  first look that finds the store ready publishes the file as it is then -- unless a version was
  published since this broker started (by another broker, or ``halfmq acl``): that one is newer,
  and is enforced instead (a key revoked meanwhile stays revoked).
* Every ``reload_seconds`` the broker looks at its file (:meth:`AclRuntime.reload`, which the
  scheduler :mod:`broker_service.schedulers.acl_reload` calls): a changed, valid file is
  published; an invalid edit is logged and the last good version stays.  It then reads the newest version in the
  store and enforces it -- so brokers sharing a database converge on the last version any of them
  published (from its file, or from ``halfmq acl``).
* A nonce is remembered in the store until its request's timestamp leaves the window (in the
  request's own write, see :mod:`broker_service.domain.ports.nonces`): a request replayed to any
  broker on the same database is refused.  Expired nonces are purged as the file is watched.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from broker_service.acl.errors import AclFileError
from broker_service.acl.file import dump_acl, parse_acl
from broker_service.acl.model import AclConfig
from broker_service.domain.errors import DomainError
from broker_service.domain.ports import NonceKey, RequestNonce, Store, nonces

log = logging.getLogger("halfmq.acl")

_PURGE_EVERY_MS = 5_000


@dataclass(eq=False)
class AclRuntime:
    """The ACL of the file at ``path``, enforced by broker ``broker_id``: nonces are kept
    ``window_ms``, the file looked at every ``reload_seconds``."""

    path: Path
    store: Store
    clock: Callable[[], int]
    _: KW_ONLY
    broker_id: str
    window_ms: int
    reload_seconds: float

    def __post_init__(self) -> None:
        self._file_text = self.path.read_text(encoding="utf-8")
        self.config: AclConfig = parse_acl(self._file_text, str(self.path))
        self._file_digest = _digest(self._file_text)
        self._applied_id: int | None = None
        self._next_purge = 0
        self._unpublished = False  # the file read at start, not yet published (store not ready)
        self._started_at = 0  # when start() ran (epoch ms)

    # -- life ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Publish this broker's file as the newest version: now, or (the store not ready) at the
        first :meth:`reload` that finds the store ready.  The reloads are the schedulers' to run
        (:mod:`broker_service.schedulers.acl_reload`)."""
        self._started_at = self.clock()
        try:
            await self._publish(self.config, self._file_text)
        except DomainError as error:  # the store is not ready: enforced now, published later
            self._unpublished = True
            log.warning(
                "ACL version %s enforced from its file, not published yet: %s",
                self.config.version,
                error.message,
            )

    async def reload(self) -> None:
        """One look at the file (publish it if it changed and is valid), then at the store."""
        if self._unpublished:  # the store was not ready at start
            await self._publish_late()
        await self._reload_file()
        latest = await self.store.read(lambda tx: tx.latest_acl())
        if latest is not None and latest[0] != self._applied_id:
            self._apply(*latest)

    async def _publish_late(self) -> None:
        """The store is ready now: publish the file as it is now (``halfmq acl`` may have changed
        it meanwhile), unless a version was published since this broker started -- newer than
        its file, it is what :meth:`reload` enforces next."""
        started = self._started_at
        newer = await self.store.read(lambda tx: tx.acl_published_since(started))
        self._unpublished = False
        if newer:
            log.info("ACL: a version was published since this broker started; its file's is not")
        else:
            self._file_digest = ""  # read, checked and published by _reload_file

    async def _reload_file(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            log.error("ACL file %s unreadable (%s); version %s stays", self.path, exc.strerror,
                      self.config.version)  # fmt: skip
            return
        digest = _digest(text)
        if digest == self._file_digest:
            return
        try:
            config = parse_acl(text, str(self.path))
        except AclFileError as error:
            self._file_digest = digest  # said once; the next edit is read again
            log.error("ACL file refused, version %s stays: %s", self.config.version, error)
            return
        await self._publish(config, text)
        self._file_digest = digest  # only once published: a failed publish is tried again

    def _apply(self, published_id: int, version: str, content: str) -> None:
        """A version another broker (or this one, earlier) published: parsed from the store."""
        try:
            config = parse_acl(content, f"published ACL {version}")
        except AclFileError as error:
            log.error("published ACL %s refused, version %s stays: %s", version,
                      self.config.version, error)  # fmt: skip
            self._applied_id = published_id
            return
        self._enforce(published_id, config)

    def _enforce(self, published_id: int, config: AclConfig) -> None:
        if config.version != self.config.version:
            log.info("ACL version %s now enforced (was %s)", config.version, self.config.version)
        self.config = config
        self._applied_id = published_id

    async def _publish(
        self, config: AclConfig, content: str, nonce: RequestNonce | None = None
    ) -> None:
        now = self.clock()
        published_id = await self.store.write(
            lambda tx: tx.publish_acl(config.version, content, now, self.broker_id),
            nonce=nonces.take(nonce),
        )
        log.info("ACL version %s published by %s", config.version, self.broker_id)
        self._enforce(published_id, config)  # parsed already: not read back from the store

    # -- changes from `halfmq acl` --------------------------------------------------------------

    async def update(
        self, change: Callable[[AclConfig], AclConfig], *, nonce: RequestNonce | None = None
    ) -> AclConfig:
        """Apply ``change`` to the enforced version, write the file and publish the result (with
        ``nonce``, the signed request's, as every write of a request)."""
        config = change(self.config)
        content = dump_acl(config)
        _write_atomically(self.path, content)
        await self._publish(config, content, nonce)
        # Only once published: a publish that failed (the store not ready) leaves the file
        # changed to the next reload, which publishes it then.
        self._file_digest = _digest(content)
        return config

    # -- replay protection ----------------------------------------------------------------------

    async def remember_nonce(self, nonce: NonceKey) -> bool:
        """Remember a request's nonce on its own (a request that wrote nothing); True the first
        time it is seen on any broker of the database.  A writing request's nonce rides with its
        own write instead (:mod:`broker_service.domain.ports.nonces`)."""
        return await self.store.write(lambda tx: tx.remember_nonces([nonce])[0])

    async def purge_nonces(self) -> None:
        """Forget nonces whose request's timestamp has left the window (every few seconds)."""
        now = self.clock()
        if now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY_MS
        before = now - self.window_ms  # a request signed earlier is refused as too old
        await self.store.write(lambda tx: tx.purge_nonces(before))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_atomically(path: Path, content: str) -> None:
    """Write the file whole or not at all (a reader never sees half of it); keep it private."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(content)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
