"""``halfmq store stats|purge``: what the broker's store holds, and a purge round now (retention,
docs/store.md), over REST (admin routes ``/v1/store/...``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from halfmq.cli.client import Json, json_call
from halfmq.cli.output import Broker, broker_options, fields_panel, table

app = typer.Typer(
    help="Show what the store holds; purge what retention lets go.", no_args_is_help=True
)


@app.command()
@broker_options(timeout=30.0)
def stats(broker: Broker) -> None:
    """Size and free space, rows per table, the oldest message, the export watermark, messages
    retention expired per consumer group, and the retention settings."""
    broker.ask(lambda client: client.call(json_call("GET", "/v1/store/stats")), render_stats)


@app.command()
@broker_options(timeout=600.0)
def purge(
    broker: Broker,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run/--no-dry-run", help="Only report what would go; delete nothing."),
    ] = False,
) -> None:
    """Run one purge round now, as the broker does every purge_interval_seconds: messages,
    resolved transactions, finished deliveries and trace events older than the retention go,
    unless a consumer group has not passed them or the export has not read them."""
    broker.ask(
        lambda client: client.call(json_call("POST", "/v1/store/purge", {"dry_run": dry_run})),
        render_purge,
    )


# -- rendering -----------------------------------------------------------------------------------


def size(n: int) -> str:
    """Bytes in binary units: ``229,376 B`` -> ``224.0 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age(seconds: float | None) -> str | None:
    """``93784.5`` -> ``1d 2h 3m``; under a minute in seconds."""
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    parts.append(f"{minutes}m")
    return " ".join(parts)


def hours(value: Any) -> str:
    return "none" if value is None else f"{value:g} h"


def _counts(title: str, columns: list[str], counts: Iterable[tuple[str, int]]) -> RenderableType:
    """Named counts as a table (``1,234``)."""
    return table(title, columns, [[name, f"{n:,}"] for name, n in counts], count=False)


def render_stats(answer: Json) -> RenderableType:
    retention = answer["retention"]
    oldest = answer["oldest_message_at"]
    fields = [
        ("store", answer["dialect"]),
        ("size", size(answer["size_bytes"])),
        ("free", size(answer["free_bytes"])),
        (
            "oldest message",
            None if oldest is None else f"{oldest} ({age(answer['oldest_message_age_seconds'])})",
        ),
        ("export watermark", answer["export_watermark"] or "never exported"),
        ("retention", hours(retention["retention_hours"])),
        ("dead letters kept", hours(retention["dead_letter_retention_hours"])),
        ("hard limit", hours(retention["hard_limit_hours"])),
        ("wait for export", retention["wait_for_export"]),
    ]
    rows = _counts("rows", ["table", "rows"], answer["rows"].items())
    parts: list[RenderableType] = [fields_panel("store", fields), rows]
    expired = answer["expired"]
    if expired:
        columns = ["consumer group", "messages"]
        parts.append(_counts("expired before consumed", columns, sorted(expired.items())))
    return Group(*parts)


def render_purge(answer: Json) -> RenderableType:
    dry = answer["dry_run"]
    purged: dict[str, int] = answer["purged"]
    total = sum(purged.values())
    title = "dry run: nothing deleted" if dry else "purged"
    fields = [
        ("would delete" if dry else "deleted", f"{total:,} rows"),
        ("complete", answer["complete"]),
        ("held by the export", answer["export_held"]),
        ("seconds", f"{answer['seconds']:.2f}"),
    ]
    parts: list[RenderableType] = [
        fields_panel(title, fields),
        _counts("rows that would go" if dry else "rows deleted", ["table", "rows"], purged.items()),
    ]
    expired = [
        [e["group"], e["client_id"] or None, e["topic"], e["queue_id"], e["count"]]
        for e in answer["expired"]
    ]
    held = [
        [h["topic"], h["queue_id"], h["group"], h["client_id"] or None, h["offset"]]
        for h in answer["held"]
    ]
    listed = [  # a table each, when it has rows
        ("expired before consumed (past the hard limit)",
         ["consumer group", "member", "topic", "queue", "messages"], expired),
        ("kept: old messages a consumer group has not passed",
         ["topic", "queue", "consumer group", "member", "at offset"], held),
    ]  # fmt: skip
    parts += [
        table(heading, columns, rows, count=False) for heading, columns, rows in listed if rows
    ]
    if not answer["complete"]:
        parts.append(Text("the round stopped at its row limit: run it again", style="yellow"))
    if answer["export_held"]:
        parts.append(
            Text(
                "the reconciliation export has not read everything old: run `halfmq export`, "
                "or set retention_wait_for_export=false if you do not use it",
                style="yellow",
            )
        )
    return Group(*parts)
