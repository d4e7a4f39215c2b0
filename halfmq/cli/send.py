"""``halfmq send TOPIC BODY``: send one message (text, or a file's bytes as base64)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Annotated

import typer
from rich.console import RenderableType

from halfmq.cli.client import Json
from halfmq.cli.output import Broker, broker_options, fields_panel, time_flag, time_option


@broker_options()
def send(
    broker: Broker,
    topic: Annotated[
        str, typer.Argument(metavar="TOPIC", help="The topic to send to.", show_default=False)
    ],
    body: Annotated[
        str | None,
        typer.Argument(
            metavar="BODY",
            help="The body, as UTF-8 text (leave out with --base64-file).",
            show_default=False,
        ),
    ] = None,
    tag: Annotated[str | None, typer.Option(help="The message's tag (RocketMQ tags).")] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY", help="A business key to find it by; repeatable."),
    ] = None,
    property_: Annotated[
        list[str] | None,
        typer.Option("--property", metavar="K=V", help="A user property; repeatable."),
    ] = None,
    sharding_key: Annotated[
        str | None, typer.Option(help="Messages with one sharding key go to one queue, in order.")
    ] = None,
    queue_id: Annotated[int | None, typer.Option(min=0, help="Send to this queue.")] = None,
    delay_level: Annotated[
        int | None, typer.Option(min=0, help="RocketMQ delay level 1-18 (1s ... 2h); 0 none.")
    ] = None,
    deliver_at: Annotated[str | None, time_flag("Deliver at")] = None,
    msg_id: Annotated[
        str | None, typer.Option(help="Your unique id; a retransmit with it is stored once.")
    ] = None,
    base64_file: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, readable=True, help="Send this file's bytes, as base64."
        ),
    ] = None,
) -> None:
    """Send one message to TOPIC; prints where it was stored."""
    message = _body(body, base64_file)
    message.update(
        _optional(
            tags=tag,
            keys=key or None,
            properties=_properties(property_ or []) or None,
            sharding_key=sharding_key,
            queue_id=queue_id,
            delay_level=delay_level,
            deliver_at=time_option(deliver_at, "--deliver-at"),
            msg_id=msg_id,
        )
    )
    broker.ask(lambda client: client.send(topic, message), render_result)


def _body(body: str | None, base64_file: Path | None) -> Json:
    if body is None and base64_file is None:
        raise typer.BadParameter("give BODY, or --base64-file PATH", param_hint="BODY")
    if body is not None and base64_file is not None:
        raise typer.BadParameter("give BODY or --base64-file, not both", param_hint="BODY")
    if base64_file is not None:
        data = base64.b64encode(base64_file.read_bytes()).decode("ascii")
        return {"body": data, "encoding": "base64"}
    return {"body": body, "encoding": "utf-8"}


def _properties(pairs: list[str]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{pair!r} is not K=V", param_hint="--property")
        if name in properties:
            raise typer.BadParameter(f"{name!r} is given twice", param_hint="--property")
        properties[name] = value
    return properties


def _optional(**fields: object) -> Json:
    return {name: value for name, value in fields.items() if value is not None}


def render_result(result: Json) -> RenderableType:
    title = (
        "duplicate: stored before" if result.get("duplicate") else result.get("status", "SEND_OK")
    )
    fields = [
        ("msg_id", result["msg_id"]),
        ("topic", result["topic"]),
        ("queue", result["queue_id"]),
        ("offset", result.get("queue_offset")),
    ]
    if result.get("deliver_at"):
        fields.append(("deliver at", result["deliver_at"]))
    return fields_panel(title, fields)
