"""The demo's report: balances, what happened to the transfers, what the outsider tried and how
the broker answered, the invariants (PASS / FAIL with their numbers), timings, and the
reconciliation's summary.  Nothing here prints a secret key: the report shows access keys only."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from demo_bank.proof import BankView
from demo_bank.runner import DemoResult


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
        console.print("[bold green]every invariant holds[/bold green]")
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
    sent = len(plan.transfers) + (1 if "kill-bob" in plan.events else 0)
    table.add_row("requested", f"{sent:,}", "runner")
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
        table.add_row("retried by Smith (nacked deliveries)", f"{broker.nacked:,}", "broker")
        table.add_row("dead-lettered", f"{broker.dead_letters:,}", "broker")
        table.add_row("redelivered after a lease ran out", f"{broker.expired:,}", "broker")
    if result.bob is not None and result.smith is not None:
        table.add_row("debits in Bob's ledger", f"{result.bob.rows:,}", "Bob's database")
        table.add_row("credits in Smith's ledger", f"{result.smith.rows:,}", "Smith's database")
    if plan.faults:
        injected = (
            f"{plan.count('overdraw')} overdraws, {plan.count('drop-commit')} dropped commits, "
            f"{plan.count('poison')} poison transfer"
        )
        table.add_row("faults planned", injected, "runner")
    console.print(table)
    for event in result.events:
        console.print(f"  · {event}")


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
        f"(transfer {target.transfer_id}, {target.state} when attacked)",
    )
    table.add_column("")
    table.add_column("attempt")
    table.add_column("request")
    table.add_column("answer")
    table.add_column("expected")
    for attempt in report.attempts:
        mark = (
            "[green]refused[/green]"
            if attempt.as_expected
            else "[bold red]NOT AS EXPECTED[/bold red]"
        )
        answer = f"{attempt.status if attempt.status is not None else '-'} {attempt.code or ''}"
        what = f"{attempt.what} ({attempt.note})" if attempt.note else attempt.what
        expected = f"{attempt.expected_status} {attempt.expected_code}"
        table.add_row(mark, what, attempt.request, answer.strip(), expected)
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
    if not outcome.ran or outcome.summary is None:
        console.print(f"reconciliation: {outcome.note}")
        return
    summary = outcome.summary
    found = {k: v["count"] for k, v in summary["counts"].items() if v["count"]}
    listed = ", ".join(f"{kind} {n}" for kind, n in found.items()) or "no anomaly"
    console.print(
        f"reconciliation (Spark, {outcome.seconds:.0f}s) of {summary['date']}: "
        f"[bold]{summary['status']}[/bold] -- {summary['critical']} critical, "
        f"{summary['warning']} warnings ({listed}); report in {outcome.note}"
    )
