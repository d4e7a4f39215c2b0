"""The gate remembers what the enforced ACL allowed (a producer asks the same all day long), and
only for that version: an ask allowed before a reload that revokes it is refused after it, on
the event loop's path-only memory and on the memory a commit's guard shares from the writer."""

from __future__ import annotations

import pytest

from broker_service.acl.errors import AclError
from broker_service.acl.file import parse_acl
from broker_service.acl.model import Need, Perm
from broker_service.api.gate import AclGate
from broker_service.api.permissions import TransactionGuard
from broker_service.domain.errors import Forbidden
from broker_service.domain.transactions.model import TransactionRecord, TransactionState

GRANTED = """accounts:
  - accessKey: bob-bank-key
    secretKey: bob-bank-secret
    topicPerms: [transfers=PUB]
    groupPerms: [bob-bank=PUB]
"""
REVOKED = GRANTED.replace("[transfers=PUB]", "[transfers=DENY]")


class _Runtime:
    def __init__(self, text: str) -> None:
        self.config = parse_acl(text, "plain_acl.yml")
        self.window_ms = 300_000


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("not called")


def test_an_allowed_ask_is_remembered_for_its_version_only() -> None:
    runtime = _Runtime(GRANTED)
    gate = AclGate(_app, runtime, public_ops=False, rate_per_second=0)  # type: ignore[arg-type]
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
    gate = AclGate(_app, runtime, public_ops=False, rate_per_second=0)  # type: ignore[arg-type]
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
