"""Where every transfer went: the runner's view of each one (its kind in the plan, the id of each
try that reached Bob, Bob's answer to the last) joined with the broker's record of each id (its
state, and who resolved it).

The report's figures about transfers come from here, so they add up: the check-back's commits
and rollbacks are split by the transfers they ended, the transfers in doubt by how the broker
ended them, and every planned fault is followed to its end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from demo_bank.traffic import COMMITTED, Fate

# The plan's kinds as the report names them, in the order it lists them.
KINDS = {
    "normal": "plain",
    "overdraw": "overdraw",
    "drop-commit": "dropped commit",
    "poison": "poison",
    "crash-after-commit": "crash transfer",
}
FIRST_TRY = "first try (503)"  # the try of a transfer sent again after a 503
NOT_SENT = "never sent"
NOT_AT_BROKER = "never reached the broker"
_BY = {"producer": "by Bob", "check": "by check-back", "operator": "by the operator"}
BY_CHECK = "by check-back"

States = Mapping[str, tuple[str, str | None]]  # transfer id -> (state, resolved_by)


@dataclass(frozen=True, slots=True)
class Line:
    """``count`` transfers of one ``kind`` that Bob answered ``answer`` and the broker ended
    ``ending``."""

    kind: str
    answer: str
    ending: str
    count: int


def answer_of(fate: Fate) -> str:
    if fate.outcome == COMMITTED:
        return "commit pending" if fate.pending else "committed"
    return fate.outcome  # rolled back | in doubt | gave up


def ending(states: States, transfer_id: str) -> str:
    """How the broker ended one id: "committed by check-back", ..., or that it never had it."""
    found = states.get(transfer_id)
    if found is None:
        return NOT_AT_BROKER
    state, by = found
    if state not in ("COMMITTED", "ROLLED_BACK"):
        return f"still open ({state})"
    verb = "committed" if state == "COMMITTED" else "rolled back"
    return f"{verb} {_BY.get(by or '', 'by ' + str(by))}"


def lines(fates: Mapping[int, Fate], states: States) -> list[Line]:
    """Every transfer the runner sent, counted by (kind, Bob's answer, the broker's ending): one
    line per combination, in the plan's order of kinds.  A try answered 503 whose half the broker
    holds is counted too (``FIRST_TRY``), and any record of Bob's group the runner did not send."""
    counts: Counter[tuple[str, str, str]] = Counter()
    sent: set[str] = set()
    for fate in fates.values():
        kind = KINDS.get(fate.kind, fate.kind)
        if not fate.ids:
            counts[(kind, answer_of(fate), NOT_SENT)] += 1
            continue
        for earlier in fate.ids[:-1]:
            sent.add(earlier)
            if earlier in states:  # a 503 after the half was stored: the check-back ends it
                counts[(kind, FIRST_TRY, ending(states, earlier))] += 1
        sent.add(fate.ids[-1])
        counts[(kind, answer_of(fate), ending(states, fate.ids[-1]))] += 1
    for stray in states.keys() - sent:
        counts[("not the runner's", "-", ending(states, stray))] += 1
    order = {label: i for i, label in enumerate(KINDS.values())}
    return [
        Line(kind, answer, end, n)
        for (kind, answer, end), n in sorted(
            counts.items(), key=lambda item: (order.get(item[0][0], len(order)), -item[1])
        )
    ]


def split(found: list[Line], end: str) -> list[tuple[str, int]]:
    """The transfers the broker ended ``end`` (e.g. "committed by check-back"), by kind and
    answer: ("dropped commit, commit pending", 25), ..."""
    return [(f"{line.kind}, {line.answer}", line.count) for line in found if line.ending == end]


def in_doubt(found: list[Line]) -> list[tuple[str, int]]:
    """The planned transfers Bob never answered (the crash transfer aside), by ending."""
    endings: Counter[str] = Counter()
    for line in found:
        if line.answer == "in doubt" and line.kind != KINDS["crash-after-commit"]:
            endings[line.ending] += line.count
    return endings.most_common()
