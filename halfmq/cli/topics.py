"""``halfmq topic create|list|show|delete``: topic administration over REST."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from halfmq.cli.client import Json
from halfmq.cli.output import Broker, broker_options, fields_panel, table

app = typer.Typer(help="Create, list, show and delete topics.", no_args_is_help=True)

NameArgument = Annotated[
    str, typer.Argument(metavar="NAME", help="The topic's name.", show_default=False)
]


@app.command()
@broker_options()
def create(
    broker: Broker,
    name: NameArgument,
    queues: Annotated[
        int | None,
        typer.Option(min=1, max=1024, help="Queues (default: the broker's default_topic_queues)."),
    ] = None,
    order: Annotated[
        bool, typer.Option("--order", help="An ordered topic (sharding_key keeps order).")
    ] = False,
) -> None:
    """Create a topic; creating it again with the same config is fine, with another it is 409."""
    with broker.connect() as client:
        topic, created = client.create_topic(name, queues, order)
    title = f"created topic {name}" if created else f"topic {name} exists (same config)"
    broker.show(topic, lambda t: render_topic(t, title))


@app.command("list")
@broker_options()
def list_(broker: Broker) -> None:
    """List the topics with their queues and message counts."""
    with broker.connect() as client:
        topics = client.list_topics()
    broker.show({"topics": topics}, lambda answer: render_topics(answer["topics"]))


@app.command("show")
@broker_options()
def show_(broker: Broker, name: NameArgument) -> None:
    """Show one topic and each queue's min/max offset."""
    broker.ask(lambda client: client.get_topic(name), lambda t: render_topic(t, f"topic {name}"))


@app.command()
@broker_options()
def delete(broker: Broker, name: NameArgument) -> None:
    """Delete a topic (its offsets continue if it is created again)."""
    with broker.connect() as client:
        client.delete_topic(name)
    broker.show({"topic": name, "deleted": True}, lambda _: Text(f"deleted topic {name}"))


def stored(topic: Json) -> int:
    """Messages in the topic's queues now: the sum of max - min offsets."""
    queues: list[dict[str, Any]] = topic.get("queue_offsets", [])
    return sum(q["max_offset"] - q["min_offset"] for q in queues)


def render_topics(topics: list[Json]) -> RenderableType:
    rows = [
        [t["name"], t["queues"], t["order"], stored(t), t.get("perm"), t["created_at"]]
        for t in topics
    ]
    return table("topics", ["name", "queues", "order", "messages", "perm", "created"], rows)


def render_topic(topic: Json, title: str) -> RenderableType:
    fields = [
        ("name", topic["name"]),
        ("queues", topic["queues"]),
        ("order", topic["order"]),
        ("perm", topic.get("perm")),
        ("created", topic["created_at"]),
        ("messages", stored(topic)),
    ]
    queues = table(
        "queues",
        ["queue", "min offset", "max offset"],
        [[q["queue_id"], q["min_offset"], q["max_offset"]] for q in topic["queue_offsets"]],
        count=False,
    )
    return Group(fields_panel(title, fields), queues)
