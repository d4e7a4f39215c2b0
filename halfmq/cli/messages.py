"""``halfmq message get|find|trace``: a message by id (and where it is in its life), by key, and
its trace: every event of its life, one row each (docs/observability.md, "Message trace")."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from halfmq.cli.client import Json, json_call, segment
from halfmq.cli.output import Broker, broker_options, fields_panel, table, time_flag, time_option

app = typer.Typer(help="Query messages.", no_args_is_help=True)

PREVIEW = 40

MsgIdArgument = Annotated[
    str, typer.Argument(metavar="MSG_ID", help="The message's msg_id.", show_default=False)
]


@app.command()
@broker_options()
def get(broker: Broker, msg_id: MsgIdArgument) -> None:
    """Show a message, its stage (HALF, COMMITTED, STORED, ...) and its copies in every topic."""
    broker.ask(lambda client: client.get_message(msg_id), render_message)


@app.command()
@broker_options()
def find(
    broker: Broker,
    topic: Annotated[str | None, typer.Option(help="Only this topic.")] = None,
    key: Annotated[str | None, typer.Option(help="Only messages with this key.")] = None,
    begin: Annotated[str | None, time_flag("Stored at or after")] = None,
    end: Annotated[str | None, time_flag("Stored before")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 32,
) -> None:
    """Find messages by key and/or topic in a time range (RocketMQ's query by key)."""
    since, until = time_option(begin, "--begin"), time_option(end, "--end")
    with broker.connect() as client:
        found = client.find_messages(topic, key, since, until, limit)
    broker.show({"messages": found}, lambda answer: render_messages(answer["messages"]))


@app.command()
@broker_options()
def trace(broker: Broker, msg_id: MsgIdArgument) -> None:
    """Show a message's trace, oldest first: stored, checked, decided, delivered, acked, and
    what its producer and consumers reported."""
    broker.ask(
        lambda client: client.call(json_call("GET", f"/v1/messages/{segment(msg_id)}/trace")),
        render_trace,
    )


def render_trace(answer: Json) -> RenderableType:
    rows = [
        [e["at"], Text(e["event"], style="bold"), e["by"], e.get("detail")]
        for e in answer["events"]
    ]
    return table(f"trace of {answer['msg_id']}", ["time", "event", "by", "detail"], rows)


def body_text(message: Json) -> Text:
    if message.get("encoding") == "base64":
        return Text.assemble(("base64 ", "dim"), message["body"])
    return Text(message["body"])


def preview(message: Json) -> Text:
    text = body_text(message)
    text.truncate(PREVIEW, overflow="ellipsis")
    return text


def render_message(message: Json) -> RenderableType:
    fields = [
        ("msg_id", message["msg_id"]),
        ("stage", message.get("stage")),
        ("topic", message["topic"]),
        ("queue", message["queue_id"]),
        ("offset", message["queue_offset"]),
        ("tags", message.get("tags")),
        ("keys", message.get("keys")),
        ("properties", message.get("properties")),
        ("sharding_key", message.get("sharding_key")),
        ("born", message.get("born_at")),
        ("stored", message.get("stored_at")),
        ("deliver at", message.get("deliver_at")),
        ("reconsumed", message.get("reconsume_times")),
        ("transaction", message.get("transaction_id")),
        ("transaction state", message.get("transaction_state")),
    ]
    parts: list[RenderableType] = [
        fields_panel(f"message {message['msg_id']}", fields),
        Panel(body_text(message), title="body", title_align="left", expand=False),
    ]
    copies = message.get("copies") or []
    if copies:
        rows = [[c["topic"], c["queue_id"], c["queue_offset"], c["stored_at"]] for c in copies]
        parts.append(table("copies", ["topic", "queue", "offset", "stored"], rows, count=False))
    return Group(*parts)


def render_messages(messages: list[Json]) -> RenderableType:
    rows = [
        [
            m["msg_id"],
            m["topic"],
            f"{m['queue_id']}:{m['queue_offset']}",
            m.get("tags"),
            m.get("keys"),
            m["stored_at"],
            preview(m),
        ]
        for m in messages
    ]
    columns = ["msg id", "topic", "queue:offset", "tags", "keys", "stored", "body"]
    return table("messages", columns, rows)
