"""The ACL part of ``SqlTx``: signed requests seen inside the timestamp window, and published ACL
versions.

A request is remembered by inserting its ``(signed_at, access_key, nonce)``: the primary key
refuses a second insert on any broker that shares the database, so a replayed request -- the same
signed timestamp, key and nonce, since none can be changed without the secret -- is caught wherever
it lands.  The key leads with the signed timestamp, so inserts land at the right edge of the table's
one B-tree and the purge (:meth:`AclPart.purge_nonces`, every few seconds) cuts its left edge.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, insert, select, text

from broker_service.store.fastpath import Prepared, rowcount_raw
from broker_service.store.part import SqlPart
from broker_service.store.schema import acl_nonces, acl_versions

_latest = select(acl_versions).order_by(acl_versions.c.id.desc()).limit(1)
# All of a group commit's rows in one statement -- one round trip, and one release of the GIL by
# the writer thread instead of one a row.  PostgreSQL: compiled once, the rows as three arrays.
# SQLite: the common case, every nonce new, binds the rows into one multi-row VALUES (below); the
# form that returns the new ones, to tell a replay from its neighbours, sends them as one JSON
# array.
_INSERT_SQLITE = (
    "INSERT INTO acl_nonces (signed_at, access_key, nonce) "
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]') FROM json_each(:rows) WHERE true "
    "ON CONFLICT DO NOTHING"
)
_INSERT_PG = (
    "INSERT INTO acl_nonces (signed_at, access_key, nonce) "
    "SELECT * FROM unnest(CAST(:signed_at AS BIGINT[]), CAST(:access_key AS TEXT[]), "
    "CAST(:nonce AS TEXT[])) "
    "ON CONFLICT DO NOTHING"
)
_RETURNING = " RETURNING signed_at, access_key, nonce"
# PostgreSQL: the new ones' transaction id (``xmin``, the same for every row), which a re-run after
# a lost COMMIT compares to tell its own nonces from a replay's (see ``nonces_inserted_by``); the
# rows' count is how many were new.  Not the rows themselves, nor a count in a CTE: both cost
# more than the bare rowcount (bench/README.md, "ACL overhead, counted", second round).
_insert_pg = Prepared(text(_INSERT_PG + " RETURNING xmin::text AS xid"))
_insert_sqlite_returning = Prepared(text(_INSERT_SQLITE + _RETURNING))
_insert_pg_returning = Prepared(text(_INSERT_PG + _RETURNING + ", xmin::text AS xid"))
_inserted_by_pg = Prepared(
    text(
        "SELECT signed_at, access_key, nonce FROM acl_nonces "
        "WHERE (signed_at, access_key, nonce) IN (SELECT * FROM unnest(CAST(:signed_at AS BIGINT[]), "
        "CAST(:access_key AS TEXT[]), CAST(:nonce AS TEXT[]))) AND xmin::text = :xid"
    )
)
# SQLite's common case, every nonce new: the rows bound straight into one multi-row VALUES
# statement (the driver caches each size's compiled statement): fewer instructions a row than the
# JSON form, which parses each row's JSON once per column (counted: bench/README.md, "ACL
# overhead, counted", second round).
_VALUES_ROWS = 300  # 900 parameters: under the 999 of older SQLite builds


@functools.lru_cache(maxsize=_VALUES_ROWS)
def _insert_values(rows: int) -> str:
    values = ",".join(["(?,?,?)"] * rows)
    return (
        f"INSERT INTO acl_nonces (signed_at, access_key, nonce) VALUES {values} "
        "ON CONFLICT DO NOTHING"
    )


_purge = delete(acl_nonces).where(acl_nonces.c.signed_at < bindparam("before"))


class AclPart(SqlPart):
    # PostgreSQL: the transaction id the last remember_* inserted nonces under (None: none, or
    # SQLite, whose COMMIT is never in doubt).
    nonce_xid: str | None = None

    def remember_new_nonces(self, nonces: Sequence[tuple[str, str, int]]) -> bool:
        """Remember each ``(access_key, nonce, signed_at)``; True when every one was new (none
        seen before, none twice).  False leaves the new ones inserted and does not say which
        they were: the caller rolls back and asks :meth:`remember_nonces`."""
        unique = list({(t, k, n): None for k, n, t in nonces})
        if len(unique) < len(nonces):
            return False
        if self._postgres:
            new = _insert_pg.all(self.conn, self._pg_columns(unique))
            inserted = len(new)
            if new:
                self.nonce_xid = new[0]["xid"]
        else:
            inserted = 0
            for start in range(0, len(unique), _VALUES_ROWS):
                chunk = unique[start : start + _VALUES_ROWS]
                params = [value for row in chunk for value in row]
                inserted += rowcount_raw(self.conn, _insert_values(len(chunk)), params)
        return inserted == len(unique)

    def remember_nonces(self, nonces: Sequence[tuple[str, str, int]]) -> list[bool]:
        """Remember each ``(access_key, nonce, signed_at)``; True where it was not seen before
        (of two equal ones in ``nonces``, the first)."""
        if not nonces:
            return []
        unique = list({(t, k, n): None for k, n, t in nonces})
        if self._postgres:
            rows = _insert_pg_returning.all(self.conn, self._pg_columns(unique))
            if rows:
                self.nonce_xid = rows[0]["xid"]
        else:
            rows = _insert_sqlite_returning.all(self.conn, {"rows": orjson.dumps(unique).decode()})
        inserted = {(row["signed_at"], row["access_key"], row["nonce"]) for row in rows}
        fresh = []
        for key, nonce, signed_at in nonces:
            fresh.append((signed_at, key, nonce) in inserted)
            inserted.discard((signed_at, key, nonce))
        return fresh

    @staticmethod
    def _pg_columns(unique: list[tuple[int, str, str]]) -> dict[str, list[Any]]:
        return {
            "signed_at": [t for t, _, _ in unique],
            "access_key": [k for _, k, _ in unique],
            "nonce": [n for _, _, n in unique],
        }

    def nonces_inserted_by(self, nonces: Sequence[tuple[str, str, int]], xid: str) -> list[bool]:
        """PostgreSQL: which of the stored ``(access_key, nonce, signed_at)`` were inserted by
        transaction ``xid`` -- an earlier attempt of this very group commit, whose COMMIT was
        lost with its connection and did land -- rather than by a replay of the request."""
        unique = list({(t, k, n): None for k, n, t in nonces})
        params: dict[str, Any] = {**self._pg_columns(unique), "xid": xid}
        rows = _inserted_by_pg.all(self.conn, params)
        mine = {(row["signed_at"], row["access_key"], row["nonce"]) for row in rows}
        return [(signed_at, key, nonce) in mine for key, nonce, signed_at in nonces]

    def purge_nonces(self, before: int) -> int:
        """Forget requests signed before ``before`` (ms): they can no longer be accepted."""
        return int(self.conn.execute(_purge, {"before": before}).rowcount)

    def latest_acl(self) -> tuple[int, str, str] | None:
        """The newest published ACL: ``(id, version, content)``."""
        row = self.conn.execute(_latest).first()
        return None if row is None else (int(row.id), str(row.version), str(row.content))

    def acl_published_since(self, at: int) -> bool:
        query = select(acl_versions.c.id).where(acl_versions.c.published_at >= at).limit(1)
        return self.conn.execute(query).first() is not None

    def publish_acl(self, version: str, content: str, at: int, by: str) -> int:
        result = self.conn.execute(
            insert(acl_versions).values(
                version=version, content=content, published_at=at, published_by=by
            )
        )
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])
