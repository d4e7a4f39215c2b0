"""The demo's ACL file: fresh keys each run, mode 0600, read by the broker's own strict reader, and
each account allowed exactly what its role needs -- judged by the broker's own decision code."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.acl.file import load_acl
from broker_service.acl.model import AclConfig, Need, Perm
from demo_bank.acl import bank_env, new_keys, write_acl

PUB, SUB = Perm.PUB, Perm.SUB


def allowed(config: AclConfig, access_key: str, *needs: Need, address: str = "127.0.0.1") -> bool:
    try:
        authorize(config, access_key, address, needs)
    except AclError:
        return False
    return True


@pytest.fixture
def config(tmp_path: Path) -> AclConfig:
    return load_acl(write_acl(tmp_path, new_keys()))


def test_each_run_writes_fresh_keys_to_a_private_file(tmp_path: Path) -> None:
    first, second = new_keys(), new_keys()
    assert not set(first.secret_keys()) & set(second.secret_keys())
    assert len(set(first.secret_keys())) == 4
    path = write_acl(tmp_path, first)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_acl(tmp_path, second)  # the next run in the same folder replaces it, still 0600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_acl(path).account("bob-bank") is not None
    assert all(secret in path.read_text() for secret in second.secret_keys())
    assert not any(secret in path.read_text() for secret in first.secret_keys())


def test_the_banks_may_do_their_part_only(config: AclConfig) -> None:
    topic, bob_group, smith_group = Need.topic, Need.group("bob-bank", PUB), "smith-bank"
    assert allowed(config, "bob-bank", topic("transfers", PUB), bob_group)
    assert not allowed(config, "bob-bank", topic("transfers", SUB))
    assert not allowed(config, "bob-bank", Need.group(smith_group, SUB))
    assert allowed(config, "smith-bank", topic("transfers", SUB), Need.group(smith_group, SUB))
    assert allowed(config, "smith-bank", topic(f"%RETRY%{smith_group}", SUB))
    assert not allowed(config, "smith-bank", topic("transfers", PUB))
    assert not allowed(config, "smith-bank", bob_group)
    for bank in ("bob-bank", "smith-bank"):
        assert not allowed(config, bank, Need.admin())


def test_the_operator_is_admin_and_the_outsider_has_its_own_corner(config: AclConfig) -> None:
    assert allowed(config, "operator", Need.admin())
    assert allowed(config, "outsider", Need.topic("outsider", PUB), Need.group("outsider", SUB))
    for need in (
        Need.topic("transfers", PUB),
        Need.topic("transfers", SUB),
        Need.group("bob-bank", PUB),
        Need.group("smith-bank", SUB),
        Need.admin(),
    ):
        assert not allowed(config, "outsider", need)


def test_only_loopback_is_let_in(config: AclConfig) -> None:
    assert allowed(config, "operator", Need.admin(), address="::1")
    assert not allowed(config, "operator", Need.admin(), address="10.0.0.7")


def test_a_bank_gets_its_keys_through_the_framework_variables() -> None:
    keys = new_keys()
    assert bank_env(keys.bob) == {
        "HALFMQ_ACCESS_KEY": "bob-bank",
        "HALFMQ_SECRET_KEY": keys.bob.secret_key,
    }
