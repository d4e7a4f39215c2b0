"""A store error tells a client its code and a reference, never the database's words (issue 29,
item 4): the driver's message -- the server's address, the broker's role, the table refused --
goes to the broker's log under the same reference.

Real parts: a broker process with the ACL on, on the machine's PostgreSQL as a throwaway role (one
that may not log in; one that may, but not read the ``topics`` table), in the test's own schema;
the role is dropped afterwards."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
from sqlalchemy import create_engine, text

from broker_service.store import migrate
from framework.signing import HalfmqAuth
from tests.support import ACL, OPERATOR, PG_BASE_URL, BrokerProcess, free_port, wait_until

_REFERENCE = re.compile(r"reference ([0-9a-f]{12})")


def _sql(*statements: str) -> None:
    engine = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


@pytest.fixture
def role(pg_url: str) -> Iterator[str]:
    """A new role's name (created by the test), dropped with whatever it was granted."""
    name = f"halfmq_r_{uuid.uuid4().hex[:10]}"
    yield name
    _sql(f'DROP OWNED BY "{name}"', f'DROP ROLE IF EXISTS "{name}"')


def _as(pg_url: str, role: str) -> str:
    return pg_url.replace("://postgres@", f"://{role}@", 1)


def _broker(url: str, tmp_path: Path) -> BrokerProcess:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    return BrokerProcess(url, free_port(), tmp_path / "broker.log", "--acl", str(acl))


def _answers(process: BrokerProcess) -> bool:
    try:
        return httpx.get(f"{process.url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _assert_told_nothing(body: str, *words: str) -> str:
    """The body names none of ``words``; its reference."""
    for word in words:
        assert word not in body, body
    found = _REFERENCE.search(body)
    assert found is not None, body
    return found.group(1)


def _logged_under(log: str, reference: str) -> str:
    lines = [line for line in log.splitlines() if reference in line and "store failure" in line]
    assert lines, f"no log line with reference {reference}:\n{log}"
    return "\n".join(lines)


def test_a_role_that_may_not_log_in_is_not_named_to_clients(
    pg_url: str, role: str, tmp_path: Path
) -> None:
    migrate.upgrade(pg_url)
    _sql(f'CREATE ROLE "{role}" NOLOGIN')
    broker = _broker(_as(pg_url, role), tmp_path)
    broker.start_unready()
    try:
        wait_until(lambda: _answers(broker), 30, "the broker to answer /healthz")
        with httpx.Client(base_url=broker.url, auth=HalfmqAuth(OPERATOR), timeout=10) as client:
            signed = client.get("/v1/topics")
        ready = httpx.get(f"{broker.url}/readyz", timeout=10)  # public: anyone may ask
    finally:
        broker.stop()
    assert signed.status_code == 503
    assert ready.status_code == 503
    told = ("not permitted", "FATAL", role, "127.0.0.1", "5432", "connection to server")
    signed_reference = _assert_told_nothing(signed.text, *told)
    ready_reference = _assert_told_nothing(ready.text, *told)
    assert "unreachable" in ready.json()["error"]["message"]
    log = broker.log_path.read_text()
    for reference in {signed_reference, ready_reference}:
        said = _logged_under(log, reference)
        assert f'role "{role}" is not permitted to log in' in said


def test_a_table_the_role_may_not_read_is_not_named_to_clients(
    pg_url: str, role: str, tmp_path: Path
) -> None:
    migrate.upgrade(pg_url)
    schema = unquote(pg_url).rsplit("search_path=", 1)[1]
    _sql(
        f'CREATE ROLE "{role}" LOGIN',
        f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"',
        f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"',
        f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"',
        f'REVOKE ALL ON "{schema}".topics FROM "{role}"',
    )
    broker = _broker(_as(pg_url, role), tmp_path)
    broker.start()
    try:
        with httpx.Client(base_url=broker.url, auth=HalfmqAuth(OPERATOR), timeout=10) as client:
            refused = client.get("/v1/topics")
            served = client.get("/v1/acl/version")  # a table it may read: served as ever
    finally:
        broker.stop()
    assert served.status_code == 200, served.text
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "STORE_UNAVAILABLE"
    reference = _assert_told_nothing(refused.text, "permission denied", "topics", role, schema)
    assert error["detail"] == {"reference": reference}
    said = _logged_under(broker.log_path.read_text(), reference)
    assert "permission denied for table topics" in said
