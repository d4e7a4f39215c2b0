"""A new user's first hour with the command line (issue 29): a bad input is one clear line and a
non-zero exit, never a traceback; a group's own limit of 0 is shown as 0; ``message find`` fits
80 columns without cutting an id; ``halfmq --broker URL <command>``; ``halfmq --help`` imports
none of the broker's heavy libraries.

Every command here runs as users run it: ``python -m halfmq ...`` in its own process, against a
real broker process where it talks to one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import BrokerProcess, free_port


def halfmq(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m halfmq ARGS`` with its output piped (as in a script), 80 columns."""
    environment = {name: value for name, value in os.environ.items() if name != "HALFMQ_BROKER"}
    environment.update({"COLUMNS": "80", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "halfmq", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        check=False,
    )


def assert_one_clear_line(result: subprocess.CompletedProcess[str], cause: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert cause in result.stderr, result.stderr


# -- item 8: bad input on `broker serve` ---------------------------------------------------------

SHORT_KEY = "accounts:\n  - accessKey: abcde\n    secretKey: 12345678\n    admin: true\n"
BAD_YAML = "accounts:\n  - accessKey: [abcdefg\n"
MISSPELT = "accounts:\n  - accesKey: abcdefgh\n    secretKey: 12345678\n"


@pytest.mark.parametrize(
    ("files", "flags", "cause"),
    [
        ({}, ["--acl", "{tmp}/missing.yml"], "missing.yml: cannot read the file: No such file"),
        (
            {"acl.yml": SHORT_KEY},
            ["--acl", "{tmp}/acl.yml"],
            "acl.yml:2: accessKey 'abcde' must be 7-128 characters",
        ),
        ({"acl.yml": BAD_YAML}, ["--acl", "{tmp}/acl.yml"], "acl.yml:3: YAML syntax"),
        (
            {"acl.yml": MISSPELT},
            ["--acl", "{tmp}/acl.yml"],
            "unknown key 'accesKey' in an account (did you mean 'accessKey'?)",
        ),
        (
            {"broker.yaml": "port: [1\nconsole: true\n"},
            ["--config", "{tmp}/broker.yaml"],
            "config file {tmp}/broker.yaml:2: YAML syntax",
        ),
        (
            {"broker.yaml": "prot: 9999\n"},
            ["--config", "{tmp}/broker.yaml"],
            "prot: not a setting (did you mean 'port'?)",
        ),
        (
            {"broker.json": '{"port": 1,}'},
            ["--config", "{tmp}/broker.json"],
            "broker.json:1: JSON syntax",
        ),
        (
            {"broker.toml": "[halfmq]\nport = \n"},
            ["--config", "{tmp}/broker.toml"],
            "broker.toml: TOML syntax",
        ),
        (
            {},
            ["--database-url", "mysql://user@127.0.0.1/halfmq"],
            "database_url: halfmq stores in SQLite or PostgreSQL, not mysql",
        ),
        ({}, ["--database-url", "not-a-url"], "database_url: not a database URL"),
        (
            {},
            ["--database-url", "postgresql+psycopg2://user@127.0.0.1/halfmq"],
            "postgresql+psycopg2 is not a driver halfmq uses",
        ),
        (
            {},
            ["--database-url", "sqlite:///{tmp}/nowhere/broker.db"],
            "the SQLite file's directory {tmp}/nowhere does not exist",
        ),
        ({}, ["--port", "70000"], "port: Input should be less than or equal to 65535"),
        # a mapping setting's flag is text the setting reads (not "a valid dictionary")
        ({}, ["--grpc-producer-groups", "transfers"], "bad topic=group pair 'transfers'"),
        ({}, ["--callback-ports", "70000"], "bad callback port '70000'"),
    ],
    ids=[
        "acl-missing",
        "acl-short-access-key",
        "acl-malformed-yaml",
        "acl-misspelt-key",
        "config-malformed-yaml",
        "config-unknown-setting",
        "config-malformed-json",
        "config-malformed-toml",
        "url-mysql",
        "url-not-a-url",
        "url-other-driver",
        "url-sqlite-missing-directory",
        "port-out-of-range",
        "grpc-producer-groups-not-pairs",
        "callback-port-out-of-range",
    ],
)
def test_bad_serve_input_is_one_clear_line(
    tmp_path: Path, files: dict[str, str], flags: list[str], cause: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [flag.format(tmp=tmp_path) for flag in flags]
    if "--database-url" not in argv:
        argv += ["--database-url", f"sqlite:///{tmp_path / 'broker.db'}"]
    result = halfmq("broker", "serve", "--port", str(free_port()), *argv, timeout=60)
    assert_one_clear_line(result, cause.format(tmp=tmp_path))
    assert result.returncode == 2
    assert not (tmp_path / "nowhere").exists()  # refused, not created
    assert not (tmp_path / "broker.db").exists()  # nothing was started


def test_the_acl_file_error_never_quotes_a_secret(tmp_path: Path) -> None:
    acl = tmp_path / "acl.yml"
    acl.write_text("accounts:\n  - accessKey: operator\n    secretKey: s3cr\n")
    result = halfmq(
        "broker", "serve", "--port", str(free_port()), "--acl", str(acl),
        "--database-url", f"sqlite:///{tmp_path / 'broker.db'}",
    )  # fmt: skip
    assert_one_clear_line(result, "acl.yml:3: secretKey must be")
    assert "s3cr" not in result.stderr


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("mysql://user@127.0.0.1/halfmq", "halfmq stores in SQLite or PostgreSQL, not mysql"),
        ("not-a-url", "not a database URL"),
        ("sqlite:///{tmp}/nowhere/broker.db", "directory {tmp}/nowhere does not exist"),
    ],
)
@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_db_commands_refuse_a_bad_url_in_one_line(
    tmp_path: Path, command: str, url: str, cause: str
) -> None:
    result = halfmq("db", command, "--database-url", url.format(tmp=tmp_path))
    assert_one_clear_line(result, cause.format(tmp=tmp_path))
    assert result.stderr.startswith("invalid --database-url: ")
    assert not (tmp_path / "nowhere").exists()


# -- a broker for the client commands ------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    folder = tmp_path_factory.mktemp("first-hour")
    process = BrokerProcess(
        f"sqlite:///{folder / 'broker.db'}", free_port(), folder / "broker.log", "--no-scheduler"
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


# -- item 9: a group's own limit of 0 ------------------------------------------------------------


def test_group_create_shows_a_limit_of_zero_as_zero(broker: BrokerProcess) -> None:
    url = broker.url
    zero = halfmq("group", "create", "no-retries", "--max-reconsume-times", "0", "--broker", url)
    assert zero.returncode == 0, zero.stderr
    row = next(line for line in zero.stdout.splitlines() if "max reconsume" in line)
    assert row.split()[1:4] == ["max", "reconsume", "0"], zero.stdout
    assert "broker default" not in zero.stdout
    shown = halfmq("group", "show", "no-retries", "--json", "--broker", url)
    assert json.loads(shown.stdout)["max_reconsume_times"] == 0

    default = halfmq("group", "create", "defaults", "--broker", url)
    assert default.returncode == 0, default.stderr
    assert "broker default" in default.stdout


# -- item 10: `message find` at 80 columns, piped ------------------------------------------------


def test_message_find_fits_80_columns_and_keeps_every_id_whole(broker: BrokerProcess) -> None:
    url = broker.url
    httpx.post(f"{url}/v1/topics", json={"name": "orders-of-the-day"}, timeout=10)
    sent = []
    for n, body in enumerate(
        ["a fairly long body that goes on to be previewed", '{"amount": 100, "to": "smith"}']
    ):
        message = {"body": body, "keys": [f"order-{n}-of-a-long-key"], "tags": "TagA"}
        answer = httpx.post(f"{url}/v1/topics/orders-of-the-day/messages", json=message)
        sent.append(answer.json())
    long_id = "user-given-msg-id-0123456789-abcdefghij-0123456789"  # 50 characters
    answer = httpx.post(
        f"{url}/v1/topics/orders-of-the-day/messages", json={"body": "x", "msg_id": long_id}
    )
    assert answer.status_code == 201, answer.text
    ids = [m["msg_id"] for m in sent] + [long_id]

    for env in ({"COLUMNS": "80"}, {"COLUMNS": ""}):  # a default terminal's width; piped
        found = halfmq("message", "find", "--topic", "orders-of-the-day", "--broker", url, env=env)
        assert found.returncode == 0, found.stderr
        lines = found.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, found.stdout
        assert "…" not in "".join(line for line in lines if "id" in line), found.stdout
        words = set(found.stdout.split())
        for msg_id in ids:
            assert msg_id in words, f"{msg_id} is not whole in:\n{found.stdout}"  # copyable
        for value in ("orders-of-the-day", "order-0-of-a-long-key", "TagA", "goes"):
            assert value in words, f"{value!r} is cut in:\n{found.stdout}"
        assert "3 shown" in found.stdout

    # A table whose words fit side by side stays a table.
    listed = halfmq("topic", "list", "--broker", url)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"┃ name +┃ queues", listed.stdout), listed.stdout
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80


# -- item 11: the global --broker ----------------------------------------------------------------


def test_a_global_broker_option_before_the_command(broker: BrokerProcess) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    created = halfmq("--broker", broker.url, "topic", "create", "global-broker", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["name"] == "global-broker"

    # The global flag wins over HALFMQ_BROKER ...
    over_env = halfmq(
        "--broker", broker.url, "topic", "show", "global-broker", "--json",
        env={"HALFMQ_BROKER": dead},
    )  # fmt: skip
    assert over_env.returncode == 0, over_env.stderr
    assert json.loads(over_env.stdout)["name"] == "global-broker"

    # ... and the command's own --broker wins over the global one.
    own = halfmq("--broker", broker.url, "topic", "list", "--broker", dead)
    assert own.returncode == 1
    assert f"cannot reach the broker at {dead}" in own.stderr
    own_first = halfmq("--broker", dead, "topic", "list", "--broker", broker.url, "--json")
    assert own_first.returncode == 0, own_first.stderr

    refused = halfmq("--broker", "ftp://example.org", "topic", "list")
    assert refused.returncode == 2
    assert "is not an http(s) URL" in refused.stderr
    assert "--broker URL" in halfmq("--help").stdout


# -- item 11: `halfmq --help` imports none of the heavy libraries --------------------------------

HEAVY = ("fastapi", "starlette", "sqlalchemy", "uvicorn", "httpx", "pydantic_settings", "pyspark")


def test_help_imports_none_of_the_heavy_libraries() -> None:
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "halfmq", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert importtime.returncode == 0, importtime.stderr
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in importtime.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "typer" in imported  # the reading works
    assert imported.isdisjoint(HEAVY), sorted(imported & set(HEAVY))
    assert "broker_service" not in imported
    assert "framework" not in imported


def test_the_listed_help_is_each_commands_own() -> None:
    """``halfmq --help`` lists the commands without importing them: each line it shows is the
    loaded command's own (its group's help=, its function's docstring)."""
    from typer.testing import CliRunner

    from halfmq.cli import COMMANDS, app, build

    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    limit = 80 - 6 - max(len(name) for name in COMMANDS)  # click's, for the commands' list
    for name, lazy in COMMANDS.items():
        command = build(name, lazy)
        own = " ".join((command.help or "").split("\n\n")[0].split())
        assert own == lazy.about, name
        line = rf"^  {name} +{re.escape(command.get_short_help_str(limit))}$"
        assert re.search(line, listed, re.M), listed


def test_the_reports_dir_help_describes_the_layout_the_console_reads(tmp_path: Path) -> None:
    from broker_service.console.reports import read_reports

    shown = halfmq("broker", "serve", "--help", env={"COLUMNS": "300"})
    help_text = " ".join(shown.stdout.split())
    said = help_text[help_text.index("--console-reports-dir") :][:400]
    for part in ("<out>/report", "date=YYYY-MM-DD/", "summary.json", "report.html"):
        assert part in said, said
    day = tmp_path / "report" / "date=2026-11-27"  # laid out as the help says
    day.mkdir(parents=True)
    (day / "summary.json").write_text('{"date": "2026-11-27", "status": "clean"}')
    (day / "report.html").write_text("<html></html>")
    [report] = read_reports(tmp_path / "report")
    assert (report.date, report.status, report.has_html) == ("2026-11-27", "clean", True)


def test_framework_purge_on_a_database_without_its_driver_is_one_line() -> None:
    result = halfmq("framework", "purge", "--database-url", "mysql://app:pw@127.0.0.1/shop")
    assert_one_clear_line(result, "cannot use mysql://app:***@127.0.0.1/shop: its driver is not")
    assert result.returncode == 1
    assert "pw@" not in result.stderr


@pytest.mark.parametrize("args", [["broker", "serve"], ["db", "current"]])
def test_a_bad_setting_in_the_environment_is_one_line(tmp_path: Path, args: list[str]) -> None:
    env = {"HALFMQ_PORT": "abc", "HALFMQ_DATABASE_URL": f"sqlite:///{tmp_path / 'broker.db'}"}
    result = halfmq(*args, env=env)
    assert_one_clear_line(result, "invalid settings: port: Input should be a valid integer")
    assert result.returncode == 2
    assert not (tmp_path / "broker.db").exists()
