"""What a run sends and breaks, decided up front from ``--seed`` so a run can be repeated.

Bob's bank opens ``bob-1..bob-4``, Smith's ``smith-1..smith-4``.  Every transfer goes from a Bob
account to a Smith account.  With faults on:

* about 3 % overdraw (more than any opening balance): rolled back, never delivered;
* about 2 % ask Bob to drop the commit request (``X-Demo-Fault: drop-commit``): the check-back
  must commit them;
* one transfer goes to ``smith-new``, an account Smith's bank has not opened: its credit fails
  every delivery and is dead-lettered, until the operator opens the account and resends it;
* at 25 % of the run Bob is SIGKILLed right after the local commit of one transfer
  (``X-Demo-Fault: crash-after-commit``) and restarted;
* at 50 % Smith is SIGKILLed mid-batch (committed credits not yet acked come again) and restarted;
* at 75 % the broker is SIGKILLed and restarted;
* Smith fails the first delivery of about 3 % of the transfers (``DEMO_BANK_FLAKY_PERCENT``).

With faults on or off, at 40 % of the run the outsider tries to get in where it does not belong
(:mod:`demo_bank.outsider`): the ACL is not a fault to switch off, so its proof is in every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from demo_bank.faults import CRASH_AFTER_COMMIT, DROP_COMMIT

BOB_ACCOUNTS = tuple(f"bob-{n}" for n in range(1, 5))
SMITH_ACCOUNTS = tuple(f"smith-{n}" for n in range(1, 5))
UNOPENED = "smith-new"
OPENING_BALANCE = 10_000_000  # cents, per Bob account; Smith's open at 0
MAX_AMOUNT = 10_000  # cents; N transfers stay far below the opening balances
OVERDRAW_AMOUNT = 50 * OPENING_BALANCE
OVERDRAW_PERCENT, DROP_PERCENT, FLAKY_PERCENT = 3.0, 2.0, 3.0
KILL_BOB_AT, KILL_SMITH_AT, RESTART_BROKER_AT = 0.25, 0.50, 0.75
OUTSIDER_AT = 0.40


@dataclass(frozen=True, slots=True)
class TransferSpec:
    index: int
    from_account: str
    to_account: str
    amount: int
    fault: str | None = None  # the X-Demo-Fault header
    kind: str = "normal"  # normal | overdraw | drop-commit | poison | crash-after-commit


@dataclass(frozen=True, slots=True)
class Plan:
    transfers: tuple[TransferSpec, ...]
    events: dict[str, int] = field(default_factory=dict)  # event -> sent count that triggers it
    faults: bool = True

    @property
    def opening_total(self) -> int:
        return OPENING_BALANCE * len(BOB_ACCOUNTS)

    def count(self, kind: str) -> int:
        return sum(1 for t in self.transfers if t.kind == kind)


def make_plan(n: int, seed: int, faults: bool, broker_restart: bool = True) -> Plan:
    """``broker_restart=False`` leaves the broker's restart out (``--clients rocketmq``: RocketMQ's
    Python client does not reopen its check stream after one; docs/demo.md)."""
    rng = random.Random(seed)
    poison = rng.randrange(n // 10, max(n // 10 + 1, n // 5)) if faults and n > 0 else -1
    specs = []
    for index in range(n):
        spec = TransferSpec(
            index,
            rng.choice(BOB_ACCOUNTS),
            rng.choice(SMITH_ACCOUNTS),
            rng.randint(1, MAX_AMOUNT),
        )
        roll = rng.uniform(0, 100)
        if not faults:
            pass
        elif index == poison:
            spec = TransferSpec(index, spec.from_account, UNOPENED, spec.amount, kind="poison")
        elif roll < OVERDRAW_PERCENT:
            spec = TransferSpec(
                index, spec.from_account, spec.to_account, OVERDRAW_AMOUNT, kind="overdraw"
            )
        elif roll < OVERDRAW_PERCENT + DROP_PERCENT:
            spec = TransferSpec(
                index, spec.from_account, spec.to_account, spec.amount, DROP_COMMIT, DROP_COMMIT
            )
        specs.append(spec)
    events = {"outsider": max(1, int(n * OUTSIDER_AT))}
    if faults:
        events |= {
            "kill-bob": max(1, int(n * KILL_BOB_AT)),
            "kill-smith": max(2, int(n * KILL_SMITH_AT)),
        }
        if broker_restart:
            events["restart-broker"] = max(3, int(n * RESTART_BROKER_AT))
    return Plan(tuple(specs), events, faults)


def crash_transfer(seed: int) -> TransferSpec:
    """The transfer whose local commit Bob does not survive."""
    rng = random.Random(seed + 1)
    return TransferSpec(
        -1,
        rng.choice(BOB_ACCOUNTS),
        rng.choice(SMITH_ACCOUNTS),
        rng.randint(1, MAX_AMOUNT),
        CRASH_AFTER_COMMIT,
        CRASH_AFTER_COMMIT,
    )
