"""``halfmq dlq list|resend``: a consumer group's dead letters."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from halfmq.cli.groups import GroupArgument
from halfmq.cli.output import Broker, broker_options, table

app = typer.Typer(help="List and resend a consumer group's dead letters.", no_args_is_help=True)


@app.command("list")
@broker_options()
def list_(
    broker: Broker,
    group: GroupArgument,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most dead letters to list.")] = 100,
) -> None:
    """Messages in %DLQ%GROUP, oldest first (resent ones show when)."""
    with broker.connect() as client:
        dead = client.dlq(group, limit)
    broker.show(
        {"messages": dead},
        lambda a: table(
            f"dead letters of {group}",
            ["msg id", "topic", "tags", "keys", "reconsume", "stored", "resent"],
            [
                [
                    m["msg_id"],
                    m.get("original_topic"),
                    m.get("tags"),
                    m.get("keys"),
                    m["reconsume_times"],
                    m["stored_at"],
                    m.get("resent_at"),
                ]
                for m in a["messages"]
            ],
        ),
    )


@app.command()
@broker_options()
def resend(
    broker: Broker,
    group: GroupArgument,
    msg_id: Annotated[str, typer.Argument(metavar="MSG_ID", show_default=False)],
) -> None:
    """Send a dead message back to its group (reconsume count reset)."""
    broker.ask(
        lambda client: client.resend(group, msg_id),
        lambda m: Text(f"resent {m['msg_id']} to {group}"),
    )
