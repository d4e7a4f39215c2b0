"""The demo's report (issue 29, items 9 and 10), rendered by Rich at 80 columns from a run's
records: its tables fit and cut no code (the outsider's ``401 SIGNATURE_MIS…``), and its figures
agree -- the check-back's commits and rollbacks in the Transfers table are the sums of the lines
that split them, the transfers in doubt are split by how the broker ended each one, and every
planned fault is followed to its end (a run that planned 65 dropped commits said where 25 went)."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

from rich.console import Console

from demo_bank.outcomes import lines
from demo_bank.outsider import PROBES, Attempt, OutsiderReport, Target
from demo_bank.plan import OPENING_BALANCE, make_plan
from demo_bank.proof import BankView, BrokerView, Invariant
from demo_bank.report import render
from demo_bank.runner import DemoConfig, DemoResult
from demo_bank.stores import Stores
from demo_bank.traffic import (
    COMMITTED,
    CRASH_INDEX,
    IN_DOUBT,
    ROLLED_BACK,
    Fate,
    transfer_id,
)

N = 200
SEED = 7
TX = "01A222929535661560DF6D0C00000E15"


def _run() -> DemoResult:
    """A run's records as the runner and the databases would give them: every fault planned, a
    few transfers in doubt (one of each ending), an overdraw whose rollback the broker restart
    lost, a transfer answered 503 whose first half the check-back rolled back."""
    plan = make_plan(N, SEED, faults=True)
    fates: dict[int, Fate] = {}
    states: dict[str, tuple[str, str | None]] = {}
    doubts = iter([("COMMITTED", "producer"), ("ROLLED_BACK", "check"), None])
    lost_rollback = resent = False
    for spec in plan.transfers:
        tid = transfer_id(spec.index)
        if spec.kind == "overdraw":
            fates[spec.index] = Fate(spec.kind, (tid,), ROLLED_BACK)
            states[tid] = ("ROLLED_BACK", "check" if not lost_rollback else "producer")
            lost_rollback = True
        elif spec.kind == "drop-commit":
            fates[spec.index] = Fate(spec.kind, (tid,), COMMITTED, pending=True)
            states[tid] = ("COMMITTED", "check")
        elif spec.index in (50, 51, 52) and spec.kind == "normal":
            fates[spec.index] = Fate(spec.kind, (tid,), IN_DOUBT)
            ended = next(doubts)
            if ended is not None:
                states[tid] = ended
        elif not resent and spec.kind == "normal":
            again = transfer_id(spec.index, 1)
            fates[spec.index] = Fate(spec.kind, (tid, again), COMMITTED)
            states[tid] = ("ROLLED_BACK", "check")
            states[again] = ("COMMITTED", "producer")
            resent = True
        else:
            fates[spec.index] = Fate(spec.kind, (tid,), COMMITTED)
            states[tid] = ("COMMITTED", "producer")
    crash = transfer_id(CRASH_INDEX)
    fates[CRASH_INDEX] = Fate("crash-after-commit", (crash,), IN_DOUBT)
    states[crash] = ("COMMITTED", "check")
    outcomes = Counter(f.outcome for i, f in fates.items() if i != CRASH_INDEX)
    committed = [t for t, (state, _) in states.items() if state == "COMMITTED"]
    bob = BankView({"bob-1": 4 * OPENING_BALANCE - len(committed)}, {t: [1] for t in committed})
    smith = BankView({"smith-1": len(committed)}, {t: [1] for t in committed})
    broker = BrokerView(states, nacked=5, retried_transfers=5, expired=3, dead_letters=1)
    target = Target(TX, "01A2229295356615", "t-00042", "PREPARED")
    attempts = [
        Attempt(
            p.key,
            p.what,
            f"{p.method} {p.path}",
            p.expected_status,
            p.expected_code,
            p.expected_status,
            p.expected_code,
        )
        for p in PROBES
    ]
    replay = "replay a request of Bob's sniffed off the wire"
    attempts.append(
        Attempt(
            "replay",
            replay,
            "GET /v1/producer-groups/bob-bank/checks",
            401,
            "NONCE_REPLAYED",
            401,
            "NONCE_REPLAYED",
            "Bob's own request: 200",
        )
    )
    config = DemoConfig(transfers=N, seed=SEED, run_dir=Path("run"), reconcile=False)
    return DemoResult(
        config, plan, Stores("b", "bob", "smith"), outcomes=dict(outcomes), fates=fates,
        settled=True, bob=bob, smith=smith, broker=broker,
        invariants=[Invariant("money is conserved across the two banks", True, "1 = 1")],
        outsider=OutsiderReport(target, attempts),
    )  # fmt: skip


def _printed(result: DemoResult, width: int = 80) -> str:
    out = io.StringIO()
    render(result, Console(file=out, width=width, color_system=None, legacy_windows=False))
    return out.getvalue()


def test_the_reports_tables_fit_80_columns_and_cut_no_code() -> None:
    result = _run()
    text = _printed(result)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # nothing cut short
    assert result.outsider is not None
    for attempt in result.outsider.attempts:
        assert f"{attempt.status} {attempt.code}" in text, attempt.key
    # A refusal other than the expected one says both, whole.
    wrong = result.outsider.attempts[0]
    result.outsider.attempts[0] = Attempt(
        wrong.key, wrong.what, wrong.request, 401, "SIGNATURE_MISSING", 200, None
    )
    text = _printed(result)
    assert "…" not in text
    assert "NOT AS EXPECTED" in text
    assert "expected 401 SIGNATURE_MISSING" in text


def _figure(text: str, label: str) -> int:
    found = re.search(rf"{re.escape(label)}\s*│\s*([\d,]+)", text)
    assert found is not None, label
    return int(found.group(1).replace(",", ""))


def test_the_check_back_figures_agree_and_every_planned_fault_is_followed() -> None:
    result = _run()
    text = _printed(result, width=200)  # one line a row, to read the figures back
    assert result.broker is not None
    committed_by_check = result.broker.by_check("COMMITTED")
    rolled_back_by_check = result.broker.by_check("ROLLED_BACK")
    rows = re.findall(r"of which by check-back\s*│\s*([\d,]+)", text)
    assert [int(n) for n in rows] == [committed_by_check, rolled_back_by_check]
    plan = result.plan
    drops = plan.count("drop-commit")
    # The lines under the table split the same figures, and add up to them.
    split = re.search(r"committed by check-back: (\d+) = (.*)", text)
    assert split is not None
    assert int(split.group(1)) == committed_by_check == drops + 1  # and the crash transfer
    assert f"{drops} dropped commit, commit pending" in split.group(2)
    assert "1 crash transfer, in doubt" in split.group(2)
    split = re.search(r"rolled back by check-back: (\d+) = (.*)", text)
    assert split is not None
    assert int(split.group(1)) == rolled_back_by_check == 3
    assert "1 overdraw, rolled back" in split.group(2)  # Bob's rollback never reached it
    assert "1 plain, in doubt" in split.group(2)
    assert "1 plain, first try (503)" in split.group(2)
    # In doubt: each of the three by how the broker ended it, nothing left to subtraction.
    doubt = re.search(r"3 in doubt: .*", text.replace("\n", " "))
    assert doubt is not None
    assert "1 committed by Bob" in doubt.group(0)
    assert "1 rolled back by check-back" in doubt.group(0)
    assert "1 never reached the broker" in doubt.group(0)
    # Every planned fault is in the table, all of it.
    found = lines(result.fates, result.broker.states)
    per_kind = Counter()
    for line in found:
        if line.answer != "first try (503)":
            per_kind[line.kind] += line.count
    assert per_kind["dropped commit"] == drops
    assert per_kind["overdraw"] == plan.count("overdraw")
    assert per_kind["poison"] == plan.count("poison") == 1
    assert per_kind["crash transfer"] == 1
    assert sum(per_kind.values()) == N + 1
    assert re.search(
        rf"dropped commit\s*│\s*commit pending\s*│\s*committed by check-back\s*│\s*{drops}", text
    )
    assert f"{drops} dropped commits" in text
