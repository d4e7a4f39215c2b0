"""``halfmq demo``: the Bob-to-Smith transfer demo (``demo_bank.runner``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from demo_bank.runner import DemoConfig, Interrupted, run
from demo_bank.stores import DEFAULT_PG


def demo(
    transfers: Annotated[int, typer.Option(help="How many transfers to send", min=1)] = 3000,
    store: Annotated[
        str, typer.Option(help="sqlite (files in --dir) or postgresql (three databases)")
    ] = "sqlite",
    seed: Annotated[int, typer.Option(help="Makes the faults repeatable")] = 7,
    faults: Annotated[bool, typer.Option("--faults/--no-faults", help="Inject faults")] = True,
    concurrency: Annotated[int, typer.Option(help="Transfers in flight at once", min=1)] = 32,
    run_dir: Annotated[Path, typer.Option("--dir", help="Databases (sqlite) and logs")] = Path(
        "halfmq-demo"
    ),
    pg_url: Annotated[
        str, typer.Option(help="A database on the PostgreSQL server to create the three in")
    ] = DEFAULT_PG,
    settle_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for everything to settle")
    ] = 90.0,
    clients: Annotated[
        str,
        typer.Option(
            help="The banks' clients: halfmq (the framework, REST) or rocketmq (RocketMQ 5's "
            "Python client on the broker's gRPC port)"
        ),
    ] = "halfmq",
    reconcile: Annotated[
        bool,
        typer.Option(
            "--reconcile/--no-reconcile",
            help="Run the Spark reconciliation afterwards (skipped with a note without Java)",
        ),
    ] = True,
) -> None:
    """Bob's bank pays Smith's bank: the broker and both banks as real processes, thousands of
    concurrent transfers, injected faults, and the invariants read back from both databases.
    Exits 1 when an invariant fails or the run does not settle."""
    from demo_bank.report import render

    if store not in ("sqlite", "postgresql"):
        raise typer.BadParameter("sqlite or postgresql", param_hint="--store")
    if clients not in ("halfmq", "rocketmq"):
        raise typer.BadParameter("halfmq or rocketmq", param_hint="--clients")
    console = Console()
    config = DemoConfig(
        transfers=transfers,
        store=store,
        seed=seed,
        faults=faults,
        concurrency=concurrency,
        run_dir=run_dir,
        pg_url=pg_url,
        settle_timeout=settle_timeout,
        reconcile=reconcile,
        clients=clients,
    )
    try:
        result = run(config, console)
    except BaseException as error:
        exc = _interruption(error)
        if exc is None:
            raise
        # run() stopped every process it started; transfer threads still blocked on a dead bank
        # must not hold the exit up, so leave at once.
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        console.print(f"[red]{what}: every process the demo started was stopped[/red]")
        sys.stdout.flush()
        os._exit(130 if isinstance(exc, KeyboardInterrupt) else 143)
    render(result, console)
    raise typer.Exit(result.exit_code)


def _interruption(error: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM behind ``error``, if one is.  A signal can land inside a lock's own
    code (a thread pool's ``submit``); the error that escapes then (``RuntimeError: release
    unlocked lock``) has the interrupt as its context, and the exit must still say interrupted."""
    seen: BaseException | None = error
    for _ in range(16):  # a context chain is short; a cycle must not hold the exit up
        if seen is None:
            return None
        if isinstance(seen, KeyboardInterrupt | Interrupted):
            return seen
        seen = seen.__context__
    return None
