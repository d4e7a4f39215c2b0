"""The gate remembers what the enforced ACL allowed (a producer asks the same all day long), and
only for that version: an ask allowed before a reload that revokes it is refused after it, on
the event loop's path-only memory and on the memory a commit's guard shares from the writer.  A
half's and a commit's decisions are remembered by the body fields their rules read, and a
remembered commit guard still checks each transaction's own topic and group."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from broker_service.acl.errors import AclError
from broker_service.acl.file import parse_acl
from broker_service.acl.model import Need, Perm
from broker_service.api.app import ROUTERS
from broker_service.api.gate import AclGate
from broker_service.api.permissions import RouteRules, TransactionGuard
from broker_service.domain.errors import Forbidden
from broker_service.domain.transactions.model import TransactionRecord, TransactionState

GRANTED = """accounts:
  - accessKey: bob-bank-key
    secretKey: bob-bank-secret
    topicPerms: [transfers=PUB]
    groupPerms: [bob-bank=PUB]
"""
REVOKED = GRANTED.replace("[transfers=PUB]", "[transfers=DENY]")


_ROUTES = RouteRules.of(route for router in ROUTERS for route in router.routes)


class _Runtime:
    def __init__(self, text: str) -> None:
        self.config = parse_acl(text, "plain_acl.yml")
        self.window_ms = 300_000


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("not called")


def test_an_allowed_ask_is_remembered_for_its_version_only() -> None:
    runtime = _Runtime(GRANTED)
    gate = AclGate(_app, runtime, routes=_ROUTES, rate_per_second=0)  # type: ignore[arg-type]
    needs = [Need.topic("transfers", Perm.PUB)]
    gate._allowed(runtime.config, "bob-bank-key", "127.0.0.1", needs)
    gate._allowed(runtime.config, "bob-bank-key", "127.0.0.1", needs)  # from memory
    old = runtime.config
    runtime.config = parse_acl(REVOKED, "plain_acl.yml")  # the hot reload
    with pytest.raises(AclError):
        gate._allowed(runtime.config, "bob-bank-key", "127.0.0.1", needs)
    # A guard made before the reload decides under the old version, into the old memory: it
    # never makes the new version allow what it revoked.
    gate._allowed(old, "bob-bank-key", "127.0.0.1", needs)
    with pytest.raises(AclError):
        gate._allowed(runtime.config, "bob-bank-key", "127.0.0.1", needs)


def test_a_commits_guard_decides_through_the_gates_memory() -> None:
    runtime = _Runtime(REVOKED)
    gate = AclGate(_app, runtime, routes=_ROUTES, rate_per_second=0)  # type: ignore[arg-type]
    guard = TransactionGuard(
        runtime.config, "bob-bank-key", "127.0.0.1", Perm.PUB, "bob-bank", gate._allowed
    )
    record = TransactionRecord(
        "tx-1", "m-1", "bob-bank", "transfers", 0, 0, TransactionState.PREPARED, 0, 0
    )
    with pytest.raises(Forbidden, match="transfers"):
        guard(record)
    decided = gate._decided
    assert decided is not None
    assert decided.config is runtime.config  # the guard went through the gate's memory


def _scope(path: str) -> dict[str, Any]:
    app = SimpleNamespace(state=SimpleNamespace(transactions=None))
    return {"type": "http", "method": "POST", "path": path, "client": ("127.0.0.1", 1), "app": app}


async def _authorize(gate: AclGate, path: str, body: dict[str, Any]) -> dict[str, Any]:
    scope = _scope(path)
    rule, params = gate._rule_for("POST", path)
    await gate._authorize(scope, orjson.dumps(body), "bob-bank-key", rule, params)
    return scope


async def test_a_half_is_remembered_by_its_topic_and_group_and_for_its_version_only() -> None:
    runtime = _Runtime(GRANTED)
    gate = AclGate(_app, runtime, routes=_ROUTES, rate_per_second=0)  # type: ignore[arg-type]
    half = {"topic": "transfers", "producer_group": "bob-bank", "body": "1"}
    await _authorize(gate, "/v1/transactions", half)
    await _authorize(gate, "/v1/transactions", {**half, "body": "2"})  # from memory
    decided = gate._decided
    assert decided is not None
    assert len(decided.bodies) == 1
    # Another topic or group is another key, decided on its own.
    with pytest.raises(AclError, match="audit"):
        await _authorize(gate, "/v1/transactions", {**half, "topic": "audit"})
    with pytest.raises(AclError, match="smith-bank"):
        await _authorize(gate, "/v1/transactions", {**half, "producer_group": "smith-bank"})
    runtime.config = parse_acl(REVOKED, "plain_acl.yml")  # the hot reload
    with pytest.raises(AclError, match="transfers"):
        await _authorize(gate, "/v1/transactions", half)


async def test_a_commit_s_remembered_guard_still_checks_each_transaction() -> None:
    runtime = _Runtime(GRANTED)
    gate = AclGate(_app, runtime, routes=_ROUTES, rate_per_second=0)  # type: ignore[arg-type]
    commit = {"producer_group": "bob-bank"}
    first = await _authorize(gate, "/v1/transactions/tx-1/commit", commit)
    second = await _authorize(gate, "/v1/transactions/tx-2/commit", commit)
    guard = first["state"]["transaction_guard"]
    assert second["state"]["transaction_guard"] is guard  # one guard, remembered
    mine = TransactionRecord(
        "tx-1", "m-1", "bob-bank", "transfers", 0, 0, TransactionState.PREPARED, 0, 0
    )
    guard(mine)
    guard(mine)  # from the guard's memory
    theirs = TransactionRecord(
        "tx-2", "m-2", "bob-bank", "audit", 0, 0, TransactionState.PREPARED, 0, 0
    )
    with pytest.raises(Forbidden, match="audit"):
        guard(theirs)
    other_group = TransactionRecord(
        "tx-3", "m-3", "smith-bank", "transfers", 0, 0, TransactionState.PREPARED, 0, 0
    )
    with pytest.raises(Forbidden, match="smith-bank"):
        guard(other_group)


async def test_a_commit_without_a_group_and_one_with_a_bad_group_are_told_apart() -> None:
    runtime = _Runtime(GRANTED)
    gate = AclGate(_app, runtime, routes=_ROUTES, rate_per_second=0)  # type: ignore[arg-type]
    # A group that is not text: any known account here, and the route answers 422.
    scope = await _authorize(gate, "/v1/transactions/tx-1/commit", {"producer_group": 5})
    assert "transaction_guard" in scope["state"]
    # No group at all: an operator's decision, admin -- not the memory of the line above.
    with pytest.raises(AclError, match="admin"):
        await _authorize(gate, "/v1/transactions/tx-1/commit", {})
    with pytest.raises(AclError, match="admin"):
        await _authorize(gate, "/v1/transactions/tx-1/commit", {"producer_group": None})
