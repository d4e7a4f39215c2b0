"""``halfmq group create|show|reset-offset``: consumer-group administration over REST."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType

from halfmq.cli.client import BrokerClient, Json, _segment
from halfmq.cli.output import (
    DEFAULT_BROKER,
    AccessKeyOption,
    BrokerOption,
    JsonOption,
    SecretKeyOption,
    TimeoutOption,
    connect,
    credentials,
    fields_panel,
    show,
    table,
    time_option,
)

app = typer.Typer(help="Create, show and reset consumer groups.", no_args_is_help=True)

GroupArgument = Annotated[
    str, typer.Argument(metavar="GROUP", help="The consumer group.", show_default=False)
]


class ConsumerCalls:
    """The consumer-group routes, over the CLI's REST client."""

    def __init__(self, client: BrokerClient) -> None:
        self.client = client

    def _post(self, path: str, body: Json | None = None, **params: Any) -> Json:
        response = self.client._request("POST", path, json=body, params=params or None)
        return self.client._json(response)

    def _get(self, path: str, **params: Any) -> Json:
        return self.client._json(self.client._request("GET", path, params=params or None))

    @staticmethod
    def path(group: str, *rest: str) -> str:
        return "/".join(["/v1/consumer-groups", _segment(group), *rest])

    def create_group(self, body: Json) -> tuple[Json, bool]:
        response = self.client._request("POST", "/v1/consumer-groups", json=body)
        return self.client._json(response), response.status_code == 201

    def subscribe(self, group: str, topic: str, expression: str) -> Json:
        body = {"topic": topic, "expression": expression}
        return self._post(self.path(group, "subscriptions"), body)

    def show(self, group: str) -> Json:
        return self._get(self.path(group))

    def reset_offset(self, group: str, topic: str, timestamp: str | int) -> Json:
        return self._post(
            self.path(group, "reset-offset"), {"topic": topic, "timestamp": timestamp}
        )

    def receive(self, group: str, body: Json) -> list[Json]:
        messages: list[Json] = self._post(self.path(group, "receive"), body)["messages"]
        return messages

    def ack(self, group: str, handles: list[str]) -> Json:
        return self._post(self.path(group, "ack"), {"receipt_handles": handles})

    def dlq(self, group: str, limit: int) -> list[Json]:
        messages: list[Json] = self._get(self.path(group, "dlq"), limit=limit)["messages"]
        return messages

    def resend(self, group: str, msg_id: str) -> Json:
        return self._post(self.path(group, "dlq", _segment(msg_id), "resend"))


@app.command()
def create(
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
    consume_timestamp: Annotated[
        str | None, typer.Option(help="RFC 3339 time or epoch milliseconds.")
    ] = None,
    max_reconsume_times: Annotated[int | None, typer.Option(min=0)] = None,
    orderly: Annotated[bool, typer.Option("--orderly", help="Strict order per queue.")] = False,
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
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
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        calls = ConsumerCalls(client)
        answer, created = calls.create_group(body)
        for item in topic or []:
            name, _, expression = item.partition(":")
            calls.subscribe(group, name, expression or "*")
        shown = calls.show(group) if topic else answer
    title = f"created consumer group {group}" if created else f"consumer group {group} exists"
    show(shown, as_json, lambda g: render_group(g, title))


@app.command("show")
def show_(
    group: GroupArgument,
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Members, subscriptions, and per queue: committed and max offset, lag, in flight, retrying, dead."""
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        answer = ConsumerCalls(client).show(group)
    show(answer, as_json, lambda g: render_group(g, f"consumer group {group}"))


@app.command("reset-offset")
def reset_offset(
    group: GroupArgument,
    topic: Annotated[str, typer.Option("--topic", help="The subscribed topic.")],
    timestamp: Annotated[
        str, typer.Option("--timestamp", help="RFC 3339 time or epoch milliseconds.")
    ],
    broker: BrokerOption = DEFAULT_BROKER,
    as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
    access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Consume TOPIC again from the first message stored at or after TIMESTAMP."""
    stamp = time_option(timestamp, "--timestamp")
    assert stamp is not None
    with connect(broker, timeout, as_json, credentials(access_key, secret_key)) as client:
        answer = ConsumerCalls(client).reset_offset(group, topic, stamp)
    show(
        answer,
        as_json,
        lambda a: table(
            f"{group} reset in {topic}",
            ["queue", "offset"],
            [[q["queue_id"], q["offset"]] for q in a["queues"]],
            count=False,
        ),
    )


def render_group(group: Json, title: str) -> RenderableType:
    fields = [
        ("name", group["name"]),
        ("model", group["message_model"]),
        ("consume from", group["consume_from"]),
        ("orderly", group["orderly"]),
        ("max reconsume", group.get("max_reconsume_times") or "broker default"),
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
    ]
    queues = table(
        "queues",
        ["topic", "queue", "member", "committed", "max", "lag", "in flight", "retrying", "dead"],
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
            ]
            for q in group["queues"]
        ],
        count=False,
    )
    return Group(fields_panel(title, fields), queues)
