"""``halfmq consume GROUP``: receive, print and ack -- an operator's look at a live stream."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from halfmq.cli.groups import GroupArgument
from halfmq.cli.output import Broker, broker_options


@broker_options(timeout=40.0, json_option=False)
def consume(
    broker: Broker,
    group: GroupArgument,
    topic: Annotated[
        str | None, typer.Option(help="One subscribed topic (default: every subscription).")
    ] = None,
    client_id: Annotated[
        str | None, typer.Option(help="This member's id (default: halfmq-cli-<pid>).")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-n", min=1, help="Stop after this many messages.")
    ] = None,
    wait: Annotated[
        float,
        typer.Option(min=0, help="Stop when nothing arrives for this many seconds (0: forever)."),
    ] = 5.0,
    no_ack: Annotated[
        bool, typer.Option("--no-ack", help="Print only; the messages come again later.")
    ] = False,
) -> None:
    """Receive messages of GROUP, print each as one JSON line, and ack them."""
    import os

    member = client_id or f"halfmq-cli-{os.getpid()}"
    seen = 0
    with broker.connect() as client:
        idle_since = time.monotonic()
        while count is None or seen < count:
            poll = 20.0 if wait == 0 else min(20.0, wait)
            body = {
                "client_id": member,
                "topic": topic,
                "max_messages": min(32, (count - seen) if count else 32),
                "wait_seconds": poll,
            }
            messages = client.receive(group, body)
            if not messages:
                if wait and time.monotonic() - idle_since >= wait:
                    break
                continue
            idle_since = time.monotonic()
            for message in messages:
                typer.echo(json.dumps(message, ensure_ascii=False))
            seen += len(messages)
            if not no_ack:
                client.ack(group, [m["receipt_handle"] for m in messages])
