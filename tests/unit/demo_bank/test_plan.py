"""The run's plan: repeatable from its seed, every fault in it when faults are on, none when off."""

from __future__ import annotations

from demo_bank.plan import BOB_ACCOUNTS, OPENING_BALANCE, OVERDRAW_AMOUNT, UNOPENED, make_plan


def test_the_same_seed_plans_the_same_run() -> None:
    assert make_plan(500, 11, faults=True) == make_plan(500, 11, faults=True)
    assert make_plan(500, 11, faults=True) != make_plan(500, 12, faults=True)


def test_faults_on_plans_every_kind_and_the_process_faults() -> None:
    plan = make_plan(3000, 7, faults=True)
    assert plan.count("poison") == 1
    assert 30 < plan.count("overdraw") < 150
    assert 20 < plan.count("drop-commit") < 110
    assert set(plan.events) == {"kill-bob", "kill-smith", "restart-broker", "outsider"}
    assert plan.events["outsider"] == 1200  # at 40 %
    assert all(t.amount > OPENING_BALANCE for t in plan.transfers if t.kind == "overdraw")
    assert [t.to_account for t in plan.transfers if t.kind == "poison"] == [UNOPENED]


def test_no_faults_plans_plain_transfers_only() -> None:
    plan = make_plan(3000, 7, faults=False)
    assert {t.kind for t in plan.transfers} == {"normal"}
    assert all(t.fault is None and t.amount < OVERDRAW_AMOUNT for t in plan.transfers)
    assert plan.events == {"outsider": 1200}  # the ACL is not a fault: the outsider comes anyway
    # the normal transfers can never overdraw an account
    for account in BOB_ACCOUNTS:
        spent = sum(t.amount for t in plan.transfers if t.from_account == account)
        assert spent < OPENING_BALANCE
