"""``halfmq transaction show|list|resolve|check|checks``: half messages, an operator's hand on
them, and a transaction's check audit."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from halfmq.cli.client import Json
from halfmq.cli.output import Broker, broker_options, fields_panel, table

app = typer.Typer(help="Inspect transactions (half messages).", no_args_is_help=True)

TransactionIdArgument = Annotated[
    str, typer.Argument(metavar="TRANSACTION_ID", help="The transaction's id.", show_default=False)
]


class TransactionState(StrEnum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"


_STATE_STYLE = {
    "PREPARED": "yellow",
    "COMMITTED": "green",
    "ROLLED_BACK": "magenta",
    "DISCARDED": "red",
}
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def seconds(value: str | None) -> float | None:
    """``90``, ``90s``, ``5m``, ``2h``, ``1d`` as seconds."""
    if value is None:
        return None
    match = _DURATION.match(value.lower())
    if match is None:
        raise typer.BadParameter(
            f"{value!r} is not a duration such as 90, 90s, 5m, 2h or 1d", param_hint="--older-than"
        )
    return float(match[1]) * _UNITS[match[2]]


@app.command("show")
@broker_options()
def show_(broker: Broker, transaction_id: TransactionIdArgument) -> None:
    """Show one transaction: its state, checks and who resolved it."""
    broker.ask(lambda client: client.get_transaction(transaction_id), render_transaction)


@app.command("list")
@broker_options()
def list_(
    broker: Broker,
    state: Annotated[
        TransactionState | None, typer.Option(case_sensitive=False, help="Only this state.")
    ] = None,
    producer_group: Annotated[str | None, typer.Option(help="Only this producer group.")] = None,
    older_than: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Only those created before: 90, 90s, 5m, 2h, 1d."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 100,
) -> None:
    """List transactions, oldest first; e.g. the stuck ones: --state PREPARED --older-than 1m."""
    older_than_seconds = seconds(older_than)
    with broker.connect() as client:
        records = client.list_transactions(
            state.value if state else None, producer_group, older_than_seconds, limit
        )
    broker.show(
        {"transactions": records},
        lambda answer: render_transactions(answer["transactions"]),
    )


class Decision(StrEnum):
    COMMIT = "commit"
    ROLLBACK = "rollback"


@app.command("resolve")
@broker_options()
def resolve(
    broker: Broker,
    transaction_id: TransactionIdArgument,
    decision: Annotated[Decision, typer.Argument(case_sensitive=False, help="commit or rollback")],
) -> None:
    """Commit or roll back a transaction as an operator (e.g. a DISCARDED one)."""
    with broker.connect() as client:
        answer = client.resolve_transaction(transaction_id, decision.value)
        record = client.get_transaction(transaction_id)
    broker.show(answer if broker.as_json else record, render_transaction)


@app.command("check")
@broker_options()
def check(broker: Broker, transaction_id: TransactionIdArgument) -> None:
    """Check a transaction with its producer group again now (also a DISCARDED one)."""
    broker.ask(lambda client: client.check_transaction(transaction_id), render_transaction)


@app.command("checks")
@broker_options()
def checks(broker: Broker, transaction_id: TransactionIdArgument) -> None:
    """Show a transaction's check audit: every check (instance, answer or failure, latency),
    and whether the next round checks it, or why not."""
    broker.ask(lambda client: client.transaction_checks(transaction_id), render_check_audit)


def render_check_audit(audit: Json) -> RenderableType:
    fields = [
        ("transaction_id", audit["transaction_id"]),
        ("state", state_text(audit["state"])),
        ("check_times", audit["check_times"]),
        ("next check", audit.get("next_check_at")),
        ("due", Text(audit["due"], style="bold")),
        ("why", audit["why"]),
        ("until", audit.get("until")),
        ("claimed by", audit.get("claimed_by")),
    ]
    rows = [
        [
            c["at"],
            c.get("mode"),
            c["instance"],
            c.get("answer") or Text(c.get("failure") or "-", style="red"),
            c.get("latency_ms"),
            c.get("status") or c.get("error"),
        ]
        for c in audit["checks"]
    ]
    columns = ["time", "mode", "instance", "answer", "latency ms", "error"]
    return Group(
        fields_panel(f"checks of {audit['transaction_id']}", fields),
        table("checks", columns, rows),
    )


def state_text(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, ""))


def render_transaction(record: Json) -> RenderableType:
    fields = [
        ("transaction_id", record["transaction_id"]),
        ("state", state_text(record["state"])),
        ("producer_group", record["producer_group"]),
        ("topic", record["topic"]),
        ("msg_id", record["msg_id"]),
        ("check_times", record["check_times"]),
        ("created", record["created_at"]),
        ("resolved", record.get("resolved_at")),
        ("resolved_by", record.get("resolved_by")),
        ("resolved_client", record.get("resolved_client")),
    ]
    return fields_panel(f"transaction {record['transaction_id']}", fields)


def render_transactions(records: list[Json]) -> RenderableType:
    rows = [
        [
            r["transaction_id"],
            state_text(r["state"]),
            r["producer_group"],
            r["topic"],
            r["check_times"],
            r["created_at"],
            r.get("resolved_by"),
        ]
        for r in records
    ]
    columns = ["transaction id", "state", "group", "topic", "checks", "created", "resolved by"]
    return table("transactions", columns, rows)
