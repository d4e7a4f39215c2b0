"""The client commands of ``halfmq`` sign with ``--access-key`` / ``--secret-key`` (or
``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY``), and an ACL refusal is one clear line on stderr.

A real HTTP server records what the CLI sends (checked with the broker's own verifier) and answers
as the broker's gate does."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from halfmq.cli import app
from tests.integration.framework.signed_http import BOB, CaptureServer, refuse, verified

runner = CliRunner()
KEY_OPTIONS = ["--access-key", BOB.access_key, "--secret-key", BOB.secret_key]
BOB_ENV = {"HALFMQ_ACCESS_KEY": BOB.access_key, "HALFMQ_SECRET_KEY": BOB.secret_key}
NO_KEYS = {"HALFMQ_ACCESS_KEY": None, "HALFMQ_SECRET_KEY": None}


def halfmq(broker: str, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    environment = {**NO_KEYS, "HALFMQ_BROKER": broker, "COLUMNS": "250", **(env or {})}
    result = runner.invoke(app, list(args), env=environment)
    assert "Traceback" not in result.output, result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    return result


@pytest.fixture
def server() -> Iterator[CaptureServer]:
    with CaptureServer() as running:
        yield running


def broker_commands() -> Iterator[tuple[str, Any]]:
    def walk(command: Any, name: str) -> Iterator[tuple[str, Any]]:
        if hasattr(command, "commands"):  # a group (Typer's own, not a click.Group subclass)
            for child_name, child in command.commands.items():
                yield from walk(child, f"{name} {child_name}".strip())
        else:
            yield name, command

    yield from (
        (name, command)
        for name, command in walk(typer.main.get_command(app), "")
        if any("--broker" in p.opts for p in command.params)
    )


def test_every_command_that_talks_to_a_broker_takes_the_keys() -> None:
    commands = dict(broker_commands())
    assert {"send", "consume", "topic list", "transaction resolve", "dlq resend"} <= set(commands)
    for name, command in commands.items():
        options = {p.opts[0]: p for p in command.params}
        assert options["--access-key"].envvar == "HALFMQ_ACCESS_KEY", name
        assert options["--secret-key"].envvar == "HALFMQ_SECRET_KEY", name
        assert "ps" in (options["--secret-key"].help or ""), name


@pytest.mark.parametrize("keys_from", ["options", "environment"])
def test_commands_sign_their_requests(server: CaptureServer, keys_from: str) -> None:
    options, env = (KEY_OPTIONS, {}) if keys_from == "options" else ([], BOB_ENV)
    assert halfmq(server.url, "topic", "list", *options, env=env).exit_code == 0
    sent = halfmq(server.url, "send", "transfers", "Bob pays Smith 100", "--key", "t-1", *options,
                  env=env)  # fmt: skip
    assert sent.exit_code == 0, sent.output
    listed = halfmq(server.url, "transaction", "list", "--state", "PREPARED", *options, env=env)
    assert listed.exit_code == 0, listed.output
    assert [f"{r.method} {r.path}" for r in server.requests] == [
        "GET /v1/topics",
        "POST /v1/topics/transfers/messages",
        "GET /v1/transactions",
    ]
    assert {verified(r).access_key for r in server.requests} == {"bob-bank"}


def test_without_keys_requests_go_unsigned(server: CaptureServer) -> None:
    assert halfmq(server.url, "topic", "list").exit_code == 0
    assert [r.signed for r in server.requests] == [False]


@pytest.mark.parametrize(
    ("given", "complaint"),
    [
        (["--access-key", "bob-bank"], "--access-key needs --secret-key"),
        (["--secret-key", BOB.secret_key], "--secret-key needs --access-key"),
    ],
)
def test_one_key_without_the_other_is_a_usage_error(
    server: CaptureServer, given: list[str], complaint: str
) -> None:
    result = halfmq(server.url, "topic", "list", *given)
    assert result.exit_code == 2
    assert complaint in " ".join(result.stderr.split())
    assert BOB.secret_key not in result.output
    assert server.requests == []


def one_line(result: Result) -> str:
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert BOB.secret_key not in result.stderr
    return lines[0]


def test_a_skewed_clock_is_one_line_that_says_so() -> None:
    refusal = refuse(
        401,
        "TIMESTAMP_SKEWED",
        "the request's timestamp is +412.500 s from the broker's clock (allowed: ±300 s)",
        broker_time_ms=1_767_225_600_000,
        request_time_ms=1_767_226_012_500,
        skew_seconds=412.5,
        window_seconds=300.0,
    )
    with CaptureServer(refusal) as server:
        line = one_line(halfmq(server.url, "topic", "list", *KEY_OPTIONS))
    assert line == (
        "error: TIMESTAMP_SKEWED (HTTP 401): the local clock is 412.5 s ahead of the broker's "
        "(allowed: ±300 s): signed requests are refused until this machine's clock is "
        "corrected (NTP)"
    )


@pytest.mark.parametrize(
    ("status", "code", "message", "hint"),
    [
        (401, "SIGNATURE_MISSING", "the request is not signed", "set HALFMQ_ACCESS_KEY"),
        (401, "ACCESS_KEY_UNKNOWN", "access key 'bob-bank' is unknown", "check --access-key"),
        (401, "SIGNATURE_INVALID", "the signature does not match", "check --secret-key"),
        (403, "PERMISSION_DENIED", "access key 'bob-bank' may not PUB topic 'audit'", ""),
        (403, "ADDRESS_NOT_ALLOWED", "10.0.0.9 may not use access key 'bob-bank'", ""),
    ],
)
def test_a_refusal_is_one_line_with_its_code(
    status: int, code: str, message: str, hint: str
) -> None:
    detail: dict[str, Any] = {"access_key": "bob-bank", "resource": "audit"}
    with CaptureServer(refuse(status, code, message, **detail)) as server:
        line = one_line(halfmq(server.url, "send", "audit", "x", *KEY_OPTIONS))
        as_json = halfmq(server.url, "send", "audit", "x", "--json", *KEY_OPTIONS)
    assert line.startswith(f"error: {code} (HTTP {status}): {message}")
    assert hint in line
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"] == {"code": code, "message": message,
                                                   "detail": detail}  # fmt: skip
