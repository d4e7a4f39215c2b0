"""The proof: what the two banks' databases say, checked against the four invariants (and the
broker's decisions), plus the broker's own counts for the report.

Every invariant is read from the banks' databases.  The broker's store is read only to name the
transfers it rolled back (a rolled-back transfer leaves nothing in either bank) and to count what
happened on the way (check-backs, retries, dead letters, redeliveries)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import orjson
from sqlalchemy import func, select

from broker_service.store import schema as broker_schema
from demo_bank.db import make_engine
from demo_bank.schema import accounts, transfers
from demo_bank.settings import BOB_GROUP, SMITH_GROUP

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DLQ_TOPIC = f"%DLQ%{SMITH_GROUP}"


@dataclass(frozen=True, slots=True)
class BankView:
    """One bank's balances and its ledger: transfer id -> the amounts of its rows."""

    balances: dict[str, int]
    entries: dict[str, list[int]]

    @property
    def total(self) -> int:
        return sum(self.balances.values())

    @property
    def rows(self) -> int:
        return sum(len(amounts) for amounts in self.entries.values())


@dataclass(frozen=True, slots=True)
class BrokerView:
    states: dict[str, tuple[str, str | None]]  # transfer id -> (state, resolved_by)
    nacked: int  # deliveries answered RECONSUME_LATER
    retried_transfers: int  # messages nacked at least once
    expired: int  # deliveries whose lease ran out (the member died or was too slow)
    dead_letters: int  # copies in %DLQ%smith-bank

    def with_state(self, *states: str) -> set[str]:
        return {t for t, (state, _) in self.states.items() if state in states}

    def by_check(self, state: str) -> int:
        return sum(1 for s, by in self.states.values() if s == state and by == "check")


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    ok: bool
    numbers: str


def read_bank(url: str, direction: str) -> BankView:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            balances = {
                row.account_id: int(row.balance)
                for row in conn.execute(select(accounts.c.account_id, accounts.c.balance))
            }
            entries: dict[str, list[int]] = defaultdict(list)
            query = select(transfers.c.transfer_id, transfers.c.amount).where(
                transfers.c.direction == direction
            )
            for row in conn.execute(query):
                entries[row.transfer_id].append(int(row.amount))
    finally:
        engine.dispose()
    return BankView(balances, dict(entries))


def read_broker(url: str) -> BrokerView:
    m, t, d = broker_schema.messages, broker_schema.transactions, broker_schema.deliveries
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            keys = {
                txid: orjson.loads(keys or "[]")
                for txid, keys in conn.execute(
                    select(m.c.transaction_id, m.c["keys"]).where(m.c.topic == HALF_TOPIC)
                )
            }
            states = {
                (keys.get(row.transaction_id) or [row.transaction_id])[0]: (
                    row.state,
                    row.resolved_by,
                )
                for row in conn.execute(
                    select(t.c.transaction_id, t.c.state, t.c.resolved_by).where(
                        t.c.producer_group == BOB_GROUP
                    )
                )
            }
            per_state = Counter(
                {
                    row.state: int(row.n)
                    for row in conn.execute(
                        select(d.c.state, func.count().label("n"))
                        .where(d.c.consumer_group == SMITH_GROUP)
                        .group_by(d.c.state)
                    )
                }
            )
            retried = conn.execute(
                select(func.count(func.distinct(d.c.msg_id))).where(
                    d.c.consumer_group == SMITH_GROUP, d.c.state == "NACKED"
                )
            ).scalar_one()
            dead = conn.execute(
                select(func.count()).select_from(m).where(m.c.topic == DLQ_TOPIC)
            ).scalar_one()
    finally:
        engine.dispose()
    return BrokerView(states, per_state["NACKED"], int(retried), per_state["EXPIRED"], int(dead))


def prove(
    bob: BankView, smith: BankView, broker: BrokerView, opening_total: int
) -> list[Invariant]:
    debits, credits = bob.entries, smith.entries
    total = bob.total + smith.total
    conserved = Invariant(
        "money is conserved across the two banks",
        total == opening_total,
        f"Bob {bob.total:,} + Smith {smith.total:,} = {total:,} cents; opened with "
        f"{opening_total:,}",
    )
    once = sum(
        1 for t, amounts in debits.items() if credits.get(t) == [sum(amounts)] and len(amounts) == 1
    )
    missing = sum(1 for t in debits if t not in credits)
    twice = sum(1 for t in debits if len(credits.get(t, [])) > 1)
    exactly_once = Invariant(
        "every committed transfer is credited exactly once",
        once == len(debits),
        f"{len(debits):,} debited at Bob, {once:,} credited once at Smith with the same amount, "
        f"{missing} not credited, {twice} credited more than once",
    )
    rolled_back = broker.with_state("ROLLED_BACK")
    credited_rb = len(rolled_back & credits.keys())
    debited_rb = len(rolled_back & debits.keys())
    no_rollback_credit = Invariant(
        "no rolled-back transfer is credited",
        credited_rb == 0 and debited_rb == 0,
        f"{len(rolled_back):,} rolled back by the broker: {credited_rb} credited at Smith, "
        f"{debited_rb} still debited at Bob",
    )
    orphans = len(credits.keys() - debits.keys())
    no_orphan = Invariant(
        "no credit without a debit",
        orphans == 0,
        f"{len(credits):,} credited at Smith, {orphans} without a debit at Bob",
    )
    committed = broker.with_state("COMMITTED")
    agree = Invariant(
        "the broker's decisions match Bob's ledger",
        committed == debits.keys(),
        f"{len(committed):,} committed by the broker, {len(debits):,} debited at Bob: "
        f"{len(committed - debits.keys())} committed without a debit, "
        f"{len(debits.keys() - committed)} debited but not committed",
    )
    return [conserved, exactly_once, no_rollback_credit, no_orphan, agree]
