"""What the generator writes for one synthetic transaction: a ``Scenario``.

Each anomaly kind declares the scenario that plants one example of it (``Kind.plant``); the
generator (``generate.py``) adds a few healthy ones the job must not report.  Plain data: no
pyspark here, the generator turns the fields into columns.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One transaction's rows in the store and the ledgers.

    The defaults are a healthy transfer: a half, a commit op record, one real message delivered
    to the subscribed group and acked, Bob's debit and Smith's credit of the same amount."""

    state: str = "COMMITTED"  # the transaction's state in ``transactions``
    decision: str | None = "COMMIT"  # its op record's decision; None: no op record
    resolved_by: str = "producer"  # who decided, when there is a decision
    check_times: int = 0  # how often the broker checked back
    reals: int = 1  # real messages in the topic: 0, 1 or 2 (the second 2 s later)
    delivery: str = "ACKED"  # the state of the real message's delivery to the group
    dead_letter: bool = False  # a copy of the real message in the group's DLQ
    debit: bool = True  # Bob's debit
    credits: int = 1  # Smith's credits: 0, 1 or 2 (the second 10 s later)
    credit_extra: int = 0  # cents credited on top of the amount debited
    created_late: bool = False  # created 5 minutes before the day's end
    resolved_late: bool = False  # resolved 5 minutes after the day's end

    def __post_init__(self) -> None:
        if not 0 <= self.reals <= 2 or not 0 <= self.credits <= 2:
            raise ValueError("reals and credits are 0, 1 or 2")
        if self.reals == 2 and self.dead_letter:
            raise ValueError("a duplicate and a dead letter take the same message id slot")
