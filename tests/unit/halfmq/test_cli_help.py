"""Every command's help: each option says what it does and its default, and reads whole at 80
columns; and the tables wrap between words at 100 columns, never inside one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from broker_service.settings import BrokerSettings
from halfmq.cli import app
from halfmq.cli.messages import render_trace
from halfmq.cli.transactions import render_transactions


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command of the app, with the words that name it."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))
IDS = [" ".join(path) for path, _ in COMMANDS]


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option"]


def test_the_walk_finds_every_command() -> None:
    assert {"broker serve", "send", "transaction list", "framework purge", "demo"} <= set(IDS)
    assert len(COMMANDS) > 30


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_option_says_what_it_does_and_its_default(
    path: tuple[str, ...], command: Any
) -> None:
    for option in _options(command):
        name = option.opts[0]
        assert option.help, f"halfmq {' '.join(path)} {name} has no help text"
        has_default = option.default is not None and not (option.is_flag and not option.default)
        if has_default:
            assert option.show_default or "[default:" in option.help, (
                f"halfmq {' '.join(path)} {name} hides its default {option.default!r}"
            )


def test_every_broker_setting_flag_shows_the_settings_default() -> None:
    serve = dict(COMMANDS)[("broker", "serve")]
    flags = {option.name: option for option in _options(serve)}
    for name in BrokerSettings.model_fields:
        text = flags[name].help
        assert "[default: " in text or "Default:" in text, name
    assert "[default: 9876]" in flags["port"].help
    assert "[default: sqlite:///./halfmq.db]" in flags["database_url"].help


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_at_80_columns_shows_every_option_name_whole(
    path: tuple[str, ...], command: Any
) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, color=False)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert not re.search(r"-[\w-]*…", result.output), result.output
    for option in _options(command):
        for name in option.opts + option.secondary_opts:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", result.output), (
                f"{name} is not whole in: halfmq {' '.join(path)} --help"
            )


def _lines_at(width: int, renderable: Any) -> str:
    console = Console(width=width, record=True, color_system=None, highlight=False)
    console.print(renderable)
    return console.export_text()


def test_a_wide_table_wraps_between_words_at_100_columns() -> None:
    records = [
        {
            "transaction_id": f"01JDX8Q4Z7M2N3P4Q5R6S7T8V{n}",
            "state": "COMMITTED",
            "producer_group": "bob-bank",
            "topic": "transfers",
            "check_times": 2,
            "created_at": "2026-11-25T07:46:15.822Z",
            "resolved_by": "PRODUCER",
        }
        for n in range(3)
    ]
    text = _lines_at(100, render_transactions(records))
    assert max(len(line) for line in text.splitlines()) <= 100
    words = set(text.split())
    for record in records:
        for value in record.values():
            for token in str(value).replace("T07", " 07").replace(".822Z", "Z").split():
                assert token in words, f"{token!r} is cut in:\n{text}"


def test_a_long_text_column_wraps_between_words_at_100_columns() -> None:
    detail = (
        "handler took 12 ms, consumer group smith-bank-consumers answered RECONSUME_LATER "
        "after an exception in the handler"
    )
    events = [
        {"at": "2026-11-25T07:46:15.822Z", "event": "CLIENT_SUB", "by": "smith-bank@h#abcdef12"}
    ]
    answer = {
        "msg_id": "019A8F3C2B7E4D1A9C0B5E6F7A8B9C0D",
        "events": [{**events[0], "detail": detail}],
    }
    text = _lines_at(100, render_trace(answer))
    words = set(text.split())
    for token in [*detail.split(), "CLIENT_SUB", "smith-bank@h#abcdef12", "07:46:15Z"]:
        assert token.strip(",") in {w.strip(",") for w in words}, f"{token!r} is cut in:\n{text}"
