"""``halfmq dlq list|resend``: a consumer group's dead letters."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from halfmq.cli.groups import GroupArgument
from halfmq.cli.output import (
    DEFAULT_BROKER,
    AccessKeyOption,
    BrokerOption,
    JsonOption,
    SecretKeyOption,
    TimeoutOption,
    connect,
    credentials,
    show,
    table,
)

app = typer.Typer(help="List and resend a consumer group's dead letters.", no_args_is_help=True)


@app.command("list")
def list_(
    group: GroupArgument,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most dead letters to list.")] = 100,
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Messages in %DLQ%GROUP, oldest first (resent ones show when)."""
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        dead = client.dlq(group, limit)
    show(
        {"messages": dead},
        as_json,
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
def resend(
    group: GroupArgument,
    msg_id: Annotated[str, typer.Argument(metavar="MSG_ID", show_default=False)],
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Send a dead message back to its group (reconsume count reset)."""
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        answer = client.resend(group, msg_id)
    show(answer, as_json, lambda m: Text(f"resent {m['msg_id']} to {group}"))
