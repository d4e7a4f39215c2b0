"""The demo's report: balances, what happened to the transfers, what the outsider tried and how
the broker answered, the invariants (PASS / FAIL with their numbers), timings, and the
reconciliation's summary.  Nothing here prints a secret key: the report shows access keys only.

Every number a newcomer could wonder about says where it comes from: the extra transfer Bob
crashes on, the transfers whose answer never came ("in doubt") and how they ended, and the dead
letter the run itself resent -- resolved, as the reconciliation reports it too."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from demo_bank import outcomes
from demo_bank.proof import BankView
from demo_bank.reconcile import ReconcileOutcome
from demo_bank.runner import DemoResult
from demo_bank.traffic import CRASH_INDEX, IN_DOUBT

# How the nightly job names a dead letter that was resent and then acked (spark_reconcile's
# ``DEAD_LETTER_RESOLVED``, severity info): the demo reads it from the job's summary.json.
DEAD_LETTER_RESOLVED = "dead_letter_resolved"


def render(result: DemoResult, console: Console) -> None:
    console.rule("[bold]Bob-to-Smith: the report")
    _balances(result, console)
    _transfers(result, console)
    _outsider(result, console)
    _invariants(result, console)
    _reconcile(result, console)
    timings = " · ".join(f"{name} {seconds:.1f}s" for name, seconds in result.timings.items())
    console.print(f"timings: {timings}")
    if result.ok:
        console.print(f"[bold green]every invariant holds[/bold green]{_verdict(result.reconcile)}")
    elif not result.settled:
        console.print("[bold red]the run did not settle:[/bold red] " + "; ".join(result.pending))
    else:
        console.print("[bold red]an invariant failed[/bold red]")


def _balances(result: DemoResult, console: Console) -> None:
    table = Table(title="Balances (cents), read from the banks' databases")
    table.add_column("bank")
    table.add_column("account")
    table.add_column("balance", justify="right")
    for bank, view in (("Bob's", result.bob), ("Smith's", result.smith)):
        if view is None:
            continue
        for account, balance in sorted(view.balances.items()):
            table.add_row(bank, account, f"{balance:,}")
        table.add_row(bank, "[bold]total[/bold]", f"[bold]{view.total:,}[/bold]")
    both = _total(result.bob) + _total(result.smith)
    table.add_row("both", "[bold]total[/bold]", f"[bold]{both:,}[/bold]")
    table.add_row("", "opened with", f"{result.plan.opening_total:,}")
    console.print(table)


def _total(view: BankView | None) -> int:
    return view.total if view is not None else 0


def _transfers(result: DemoResult, console: Console) -> None:
    broker, plan, outcomes = result.broker, result.plan, result.outcomes
    table = Table(title="Transfers")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("from")
    crash = 1 if "kill-bob" in plan.events else 0
    table.add_row("requested", f"{len(plan.transfers) + crash:,}", "runner")
    if crash:
        table.add_row("  of which planned (--transfers)", f"{len(plan.transfers):,}", "runner")
        table.add_row(
            "  of which the crash transfer: Bob dies after its local commit", "1", "runner"
        )
    for name in ("committed", "rolled back", "in doubt", "gave up"):
        if outcomes.get(name):
            table.add_row(f"  Bob answered: {name}", f"{outcomes[name]:,}", "runner")
    if result.resent_503:
        table.add_row("  sent again after a 503 (broker down)", f"{result.resent_503:,}", "runner")
    if broker is not None:
        committed = broker.with_state("COMMITTED")
        rolled_back = broker.with_state("ROLLED_BACK")
        table.add_row("committed", f"{len(committed):,}", "broker")
        table.add_row("  of which by check-back", f"{broker.by_check('COMMITTED'):,}", "broker")
        table.add_row("rolled back", f"{len(rolled_back):,}", "broker")
        table.add_row("  of which by check-back", f"{broker.by_check('ROLLED_BACK'):,}", "broker")
        left = broker.with_state("PREPARED", "DISCARDED")
        if left:
            table.add_row("still open (PREPARED / DISCARDED)", f"{len(left):,}", "broker")
        rocketmq = result.config.clients == "rocketmq"
        if not rocketmq:  # RocketMQ's SimpleConsumer has no nack: it cuts the lease short
            table.add_row("retried by Smith (nacked deliveries)", f"{broker.nacked:,}", "broker")
        table.add_row("dead-lettered", f"{broker.dead_letters:,}", "broker")
        resolved = _resolved_dead_letters(result)
        if resolved:
            table.add_row(
                "  of which resent by the operator and credited once", f"{len(resolved):,}",
                "Smith's database",
            )  # fmt: skip
        expired = "redelivered after a lease ran out"
        if rocketmq:
            expired = "retried by Smith (lease cut to 1 s) or redelivered after a lease ran out"
        table.add_row(expired, f"{broker.expired:,}", "broker")
    if result.bob is not None and result.smith is not None:
        table.add_row("debits in Bob's ledger", f"{result.bob.rows:,}", "Bob's database")
        table.add_row("credits in Smith's ledger", f"{result.smith.rows:,}", "Smith's database")
    console.print(table)
    if crash:
        console.print(
            "  · the crash transfer: one transfer beyond --transfers, sent at 25 % with "
            "X-Demo-Fault: crash-after-commit; Bob SIGKILLs himself right after its local commit, "
            "and the broker's check-back must commit it"
        )
    _endings(result, console)
    if outcomes.get(IN_DOUBT):
        console.print(f"  · {_in_doubt(result)}")
    for event in result.events:
        console.print(f"  · {event}")
    for transfer_id in _resolved_dead_letters(result):
        console.print(
            f"  · dead letter resolved (info, nothing to do): transfer {transfer_id} was "
            "dead-lettered, resent from the DLQ by the demo's operator step and credited once"
        )


def _outsider(result: DemoResult, console: Console) -> None:
    """Each attempt with the answer it got and the one docs/acl.md says it must get."""
    report = result.outsider
    if report is None:
        console.print("the outsider: did not run")
        return
    if report.target is None:
        console.print(f"the outsider: {report.note}")
        return
    target = report.target
    table = Table(
        title="The outsider",
        caption=f"{{tx}} = Bob's transaction {target.transaction_id} "
        f"(transfer {target.transfer_id}, {target.state} when attacked); each answer is the one "
        "docs/acl.md gives, unless it says what was expected",
    )
    table.add_column("")
    table.add_column("attempt (request)", ratio=1, overflow="fold")
    # The code is never cut: its column takes the longest answer whole, the attempt wraps.
    table.add_column("answer", no_wrap=True)
    for attempt in report.attempts:
        mark = (
            "[green]refused[/green]"
            if attempt.as_expected
            else "[bold red]NOT AS EXPECTED[/bold red]"
        )
        answer = f"{attempt.status if attempt.status is not None else '-'} {attempt.code or ''}"
        expected = f"{attempt.expected_status} {attempt.expected_code}"
        if not attempt.as_expected:
            answer = f"{answer.strip()}\n[dim]expected[/dim] {expected}"
        what = f"{attempt.what} ({attempt.note})" if attempt.note else attempt.what
        table.add_row(mark, f"{what}\n[dim]{attempt.request}[/dim]", answer.strip())
    console.print(table)
    console.print(f"  the outsider: {report.summary()}")


def _invariants(result: DemoResult, console: Console) -> None:
    table = Table(title="Invariants, from the two banks' databases")
    table.add_column("")
    table.add_column("invariant")
    table.add_column("numbers")
    for invariant in result.invariants:
        mark = "[bold green]PASS[/bold green]" if invariant.ok else "[bold red]FAIL[/bold red]"
        table.add_row(mark, invariant.name, invariant.numbers)
    console.print(table)


def _reconcile(result: DemoResult, console: Console) -> None:
    outcome = result.reconcile
    if outcome is None:
        console.print("reconciliation: not run (--no-reconcile)")
        return
    if outcome.skipped:
        console.print(
            f"reconciliation: [bold]skipped[/bold], not failed -- {outcome.note.removeprefix('skipped: ')}; "
            "every invariant above was checked without it"
        )
        if outcome.hint:
            console.print(f"  {outcome.hint}")
        return
    if not outcome.ran or outcome.summary is None:
        console.print(f"reconciliation: [bold red]failed[/bold red] -- {outcome.note}")
        return
    summary = outcome.summary
    found = [(k, v) for k, v in summary["counts"].items() if v["count"]]
    listed = ", ".join(f"{kind}: {v['count']} {v['severity']}" for kind, v in found)
    console.print(
        f"reconciliation (Spark, {outcome.seconds:.0f}s) of {summary['date']}: "
        f"[bold]{summary['status']}[/bold] -- {summary['critical']} critical, "
        f"{summary['warning']} warnings, {summary.get('info', 0)} info "
        f"({listed or 'no anomaly'}); report in {outcome.note}"
    )
    if summary["counts"].get(DEAD_LETTER_RESOLVED, {}).get("count"):
        console.print(
            f"  {DEAD_LETTER_RESOLVED}: the dead letter the operator step resent and Smith "
            "credited -- resolved, it leaves the day clean"
        )


def _verdict(outcome: ReconcileOutcome | None) -> str:
    """The reconciliation's word at the end of the run, next to the invariants'."""
    if outcome is None:
        return ""
    if outcome.skipped:
        return " · reconciliation skipped (not failed): see above"
    if outcome.summary is None:
        return " · [red]the reconciliation did not finish[/red]: see above"
    return f" · reconciliation {outcome.summary['status']}"


def _resolved_dead_letters(result: DemoResult) -> list[str]:
    """The transfers the operator step resent from the DLQ that Smith then credited once."""
    if result.smith is None:
        return []
    return [t for t in result.resent_dead_letters if len(result.smith.entries.get(t, [])) == 1]


def _in_doubt(result: DemoResult) -> str:
    """What "in doubt" means, and how the broker's store says those transfers ended (each one
    followed by the id the runner gave it)."""
    doubt = result.outcomes.get(IN_DOUBT, 0)
    meaning = (
        f"{doubt:,} in doubt: the connection to Bob broke after the request went out (Bob was "
        "SIGKILLed with them in flight), so no answer came; the runner does not send them again "
        "(that could pay twice) and lets the databases decide"
    )
    if result.broker is None:
        return meaning
    found = outcomes.in_doubt(outcomes.lines(result.fates, result.broker.states))
    why = {
        "committed by Bob": "debited, then credited",
        "committed by check-back": "debited; the check-back found Bob's log row",
        "rolled back by check-back": "open in the killed process: no debit",
        "rolled back by Bob": "refused, no debit; Bob's answer was lost",
        outcomes.NOT_AT_BROKER: "nothing happened",
    }
    parts = [f"{n:,} {end} ({why[end]})" if end in why else f"{n:,} {end}" for end, n in found]
    return f"{meaning}: " + ", ".join(parts) if parts else meaning


def _endings(result: DemoResult, console: Console) -> None:
    """Every transfer by its kind in the plan, Bob's answer and how the broker ended it; then
    the check-back's commits and rollbacks split by those, and the planned faults' total."""
    if result.broker is None or not result.fates:
        return
    found = outcomes.lines(result.fates, result.broker.states)
    table = Table(title="How each transfer ended (by the id the runner gave it)")
    table.add_column("planned")
    table.add_column("Bob answered")
    table.add_column("the broker")
    table.add_column("count", justify="right")
    for line in found:
        table.add_row(line.kind, line.answer, line.ending, f"{line.count:,}")
    console.print(table)
    for verb in ("committed", "rolled back"):
        end = f"{verb} {outcomes.BY_CHECK}"
        parts = outcomes.split(found, end)
        if parts:
            total = sum(n for _, n in parts)
            listed = " + ".join(f"{n:,} {what}" for what, n in parts)
            console.print(f"  · {end}: {total:,} = {listed}")
    plan = result.plan
    if plan.faults:
        crash = 1 if CRASH_INDEX in result.fates else 0
        console.print(
            f"  · faults planned: {plan.count('overdraw')} overdraws, "
            f"{plan.count('drop-commit')} dropped commits, {plan.count('poison')} poison "
            f"transfer, {crash} crash transfer -- each one's end is a line of the table above"
        )
