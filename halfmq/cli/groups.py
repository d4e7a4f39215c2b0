"""``halfmq group create|show|reset-offset``: consumer-group administration over REST."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group, RenderableType

from halfmq.cli.client import Json
from halfmq.cli.output import Broker, broker_options, fields_panel, table, time_flag, time_option

app = typer.Typer(help="Create, show and reset consumer groups.", no_args_is_help=True)

GroupArgument = Annotated[
    str, typer.Argument(metavar="GROUP", help="The consumer group.", show_default=False)
]


@app.command()
@broker_options()
def create(
    broker: Broker,
    group: GroupArgument,
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", help="Subscribe to this topic (repeatable; TOPIC or TOPIC:EXPR)."),
    ] = None,
    broadcasting: Annotated[
        bool, typer.Option("--broadcasting", help="Every member gets every message.")
    ] = False,
    consume_from: Annotated[
        str,
        typer.Option(help="FIRST_OFFSET, LAST_OFFSET or TIMESTAMP (with --consume-timestamp)."),
    ] = "LAST_OFFSET",
    consume_timestamp: Annotated[str | None, time_flag()] = None,
    max_reconsume_times: Annotated[
        int | None,
        typer.Option(min=0, help="Retries before the DLQ (none: the broker's default, 16)."),
    ] = None,
    orderly: Annotated[bool, typer.Option("--orderly", help="Strict order per queue.")] = False,
) -> None:
    """Create a consumer group (the same config again is fine; another is 409) and subscribe it."""
    body: Json = {
        "name": group,
        "message_model": "BROADCASTING" if broadcasting else "CLUSTERING",
        "consume_from": consume_from.upper(),
        "orderly": orderly,
    }
    stamp = time_option(consume_timestamp, "--consume-timestamp")
    if stamp is not None:
        body["consume_timestamp"] = stamp
    if max_reconsume_times is not None:
        body["max_reconsume_times"] = max_reconsume_times
    with broker.connect() as client:
        answer, created = client.create_group(body)
        for item in topic or []:
            name, _, expression = item.partition(":")
            client.subscribe(group, name, expression or "*")
        shown = client.show_group(group) if topic else answer
    title = f"created consumer group {group}" if created else f"consumer group {group} exists"
    broker.show(shown, lambda g: render_group(g, title))


@app.command("show")
@broker_options()
def show_(broker: Broker, group: GroupArgument) -> None:
    """Members, subscriptions, and per queue: committed and max offset, lag, in flight, retrying,
    dead, and expired (purged by retention before the group passed them)."""
    broker.ask(
        lambda client: client.show_group(group),
        lambda g: render_group(g, f"consumer group {group}"),
    )


@app.command("reset-offset")
@broker_options()
def reset_offset(
    broker: Broker,
    group: GroupArgument,
    topic: Annotated[str, typer.Option("--topic", help="The subscribed topic.")],
    timestamp: Annotated[str, time_flag()],
) -> None:
    """Consume TOPIC again from the first message stored at or after TIMESTAMP."""
    stamp = time_option(timestamp, "--timestamp")
    assert stamp is not None
    with broker.connect() as client:
        answer = client.reset_offset(group, topic, stamp)
    broker.show(
        answer,
        lambda a: table(
            f"{group} reset in {topic}",
            ["queue", "offset"],
            [[q["queue_id"], q["offset"]] for q in a["queues"]],
            count=False,
        ),
    )


def _max_reconsume(value: int | None) -> int | str:
    """The group's own limit; only an absent one is the broker's (0 is a limit: no retry)."""
    return "broker default" if value is None else value


def render_group(group: Json, title: str) -> RenderableType:
    fields = [
        ("name", group["name"]),
        ("model", group["message_model"]),
        ("consume from", group["consume_from"]),
        ("orderly", group["orderly"]),
        ("max reconsume", _max_reconsume(group.get("max_reconsume_times"))),
        ("created", group["created_at"]),
    ]
    if "subscriptions" not in group:
        return fields_panel(title, fields)
    fields += [
        ("subscriptions", [f"{s['topic']} ({s['expression']})" for s in group["subscriptions"]]),
        ("members", [m["client_id"] + ("" if m["live"] else " (gone)") for m in group["members"]]),
        ("lag", group["lag"]),
        ("in flight", group["in_flight"]),
        ("retrying", group["retrying"]),
        ("dead", group["dead"]),
        # Messages retention purged before the group (a member) passed them: past the hard
        # limit, or a broadcasting member gone for the whole retention (docs/store.md).
        ("expired", sum(q.get("expired", 0) for q in group["queues"])),
    ]
    queues = table(
        "queues",
        [
            "topic",
            "queue",
            "member",
            "committed",
            "max",
            "lag",
            "in flight",
            "retrying",
            "dead",
            "expired",
        ],
        [
            [
                q["topic"],
                q["queue_id"],
                q.get("client_id"),
                q["committed_offset"],
                q["max_offset"],
                q["lag"],
                q["in_flight"],
                q["retrying"],
                q["dead"],
                q.get("expired", 0),
            ]
            for q in group["queues"]
        ],
        count=False,
    )
    return Group(fields_panel(title, fields), queues)
