"""The ACL part of ``SqlTx``: nonces seen inside the signature window, and published ACL versions.

A nonce is remembered by inserting ``(access_key, nonce)``; the primary key refuses a second
insert, on any broker that shares the database, so a replayed request is caught wherever it lands.
Expired nonces are purged in small batches, every few seconds, by the ACL runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from broker_service.store.schema import acl_nonces, acl_versions

_NONCE_PURGE_BATCH = 500

_expired = (
    select(acl_nonces.c.access_key, acl_nonces.c.nonce)
    .where(acl_nonces.c.expires_at < bindparam("now"))
    .limit(_NONCE_PURGE_BATCH)
)
_latest = select(acl_versions).order_by(acl_versions.c.id.desc()).limit(1)


class AclStore:
    conn: Connection
    _postgres: bool

    def remember_nonces(self, nonces: Sequence[tuple[str, str, int]]) -> list[bool]:
        """Insert each ``(access_key, nonce, expires_at)`` in one statement; True where it was not
        seen before (of two equal ones in ``nonces``, the first)."""
        if not nonces:
            return []
        rows = {(key, nonce): expires for key, nonce, expires in reversed(nonces)}
        inserted = {
            (row[0], row[1])
            for row in self.conn.execute(
                self._insert_nonces(),
                [{"access_key": k, "nonce": n, "expires_at": e} for (k, n), e in rows.items()],
            )
        }
        fresh = []
        for key, nonce, _ in nonces:
            fresh.append((key, nonce) in inserted)
            inserted.discard((key, nonce))
        return fresh

    def _insert_nonces(self) -> Any:
        dialect_insert = postgresql.insert if self._postgres else sqlite.insert
        return (
            dialect_insert(acl_nonces)
            .on_conflict_do_nothing(index_elements=["access_key", "nonce"])
            .returning(acl_nonces.c.access_key, acl_nonces.c.nonce)
        )

    def purge_nonces(self, now: int) -> int:
        expired = list(self.conn.execute(_expired, {"now": now}))
        for access_key, nonce in expired:
            self.conn.execute(
                delete(acl_nonces).where(
                    acl_nonces.c.access_key == access_key, acl_nonces.c.nonce == nonce
                )
            )
        return len(expired)

    def latest_acl(self) -> tuple[int, str, str] | None:
        """The newest published ACL: ``(id, version, content)``."""
        row = self.conn.execute(_latest).first()
        return None if row is None else (int(row.id), str(row.version), str(row.content))

    def publish_acl(self, version: str, content: str, at: int, by: str) -> int:
        result = self.conn.execute(
            insert(acl_versions).values(
                version=version, content=content, published_at=at, published_by=by
            )
        )
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])
