"""``halfmq framework purge`` on a service's real database (a SQLite file, the real PostgreSQL):
old rows go, young rows stay, a dry run deletes nothing, a retention shorter than the broker's
window is one red line and exit 1, and a URL's password never appears in what it prints."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, insert, select
from sqlalchemy.engine import make_url
from typer.testing import CliRunner, Result

from framework.tables import create_tables, inbox, local_transaction_log
from halfmq.cli import app

runner = CliRunner()
DAY = 86_400
SECRET = "pw-Zq81-never-shown"
NO_URL = {"HALFMQ_FRAMEWORK_DATABASE_URL": None}


def halfmq(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    result = runner.invoke(app, list(args), env={**NO_URL, "COLUMNS": "250", **(env or {})})
    assert "Traceback" not in result.output, result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def purge(url: str, *args: str) -> Result:
    return halfmq("framework", "purge", "--database-url", url, *args)


def purged_json(url: str, *args: str) -> dict[str, Any]:
    result = purge(url, *args, "--json")
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


class Service:
    """A service's database holding the framework's tables."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url)
        create_tables(self.engine)

    def add(self, name: str, ages: list[float], prefix: str) -> None:
        """Rows of ``log`` or ``inbox`` created ``ages`` seconds ago."""
        now = int(time.time() * 1000)
        rows: list[dict[str, Any]] = []
        for n, age in enumerate(ages):
            row: dict[str, Any] = {"msg_id": f"m-{prefix}{n}", "topic": "transfers"}
            row["created_at"] = now - int(age * 1000)
            if name == "log":
                row |= {"transaction_id": f"{prefix}{n}", "producer_group": "g", "state": "COMMIT"}
            else:
                row |= {"consumer_group": "g", "dedup_key": f"{prefix}{n}"}
            rows.append(row)
        table = local_transaction_log if name == "log" else inbox
        with self.engine.begin() as conn:
            conn.execute(insert(table), rows)

    def keys(self, name: str) -> set[str]:
        column = local_transaction_log.c.transaction_id if name == "log" else inbox.c.dedup_key
        with self.engine.connect() as conn:
            return set(conn.execute(select(column)).scalars())


@pytest.fixture(params=["sqlite", "postgresql"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    made = Service(url)
    made.add("log", [10 * DAY + n for n in range(12)], "old-")
    made.add("log", [DAY, 60], "young-")
    made.add("inbox", [8 * DAY, 9 * DAY, 30 * DAY], "old-")
    made.add("inbox", [6 * DAY], "young-")
    yield made
    made.engine.dispose()


def test_purge_deletes_old_rows_and_keeps_young_ones(service: Service) -> None:
    result = purge(service.url, "--keep", "7d", "--batch-size", "5")

    assert result.exit_code == 0, result.output
    assert "purged" in result.stdout
    assert "rows older than 7d" in result.stdout
    assert "halfmq_local_transaction_log" in result.stdout
    assert "halfmq_inbox" in result.stdout
    assert "1d 4h 53m 40s" in result.stdout  # the inbox's shortest retention
    assert service.keys("log") == {"young-0", "young-1"}
    assert service.keys("inbox") == {"young-0"}
    again = purged_json(service.url, "--keep", "7d")
    assert [(t["table"], t["rows"]) for t in again["tables"]] == [
        ("halfmq_local_transaction_log", 0),
        ("halfmq_inbox", 0),
    ]


def test_json_counts_rows_and_batches(service: Service) -> None:
    answer = purged_json(service.url, "--keep", "168h", "--batch-size", "5", "--pause", "0")

    assert answer["dry_run"] is False
    assert answer["keep_seconds"] == 7 * DAY
    log, box = answer["tables"]
    assert (log["table"], log["rows"], log["batches"]) == ("halfmq_local_transaction_log", 12, 3)
    assert (box["table"], box["rows"], box["batches"]) == ("halfmq_inbox", 3, 1)
    assert log["minimum_seconds"] == 6 + 15 * 30 + 3 + DAY
    assert abs(log["cutoff_ms"] - (time.time() - 7 * DAY) * 1000) < 60_000


def test_a_dry_run_deletes_nothing(service: Service) -> None:
    before = service.keys("log"), service.keys("inbox")

    result = purge(service.url, "--dry-run")

    assert result.exit_code == 0, result.output
    assert "dry run on" in result.stdout
    assert "would delete" in result.stdout
    assert (service.keys("log"), service.keys("inbox")) == before
    answer = purged_json(service.url, "--dry-run")
    assert answer["dry_run"] is True
    assert [(t["rows"], t["batches"]) for t in answer["tables"]] == [(12, 0), (3, 0)]
    assert (service.keys("log"), service.keys("inbox")) == before


def test_table_chooses_one_table(service: Service) -> None:
    answer = purged_json(service.url, "--table", "inbox")

    assert [t["table"] for t in answer["tables"]] == ["halfmq_inbox"]
    assert service.keys("inbox") == {"young-0"}
    assert len(service.keys("log")) == 14  # untouched


def test_a_retention_shorter_than_the_window_is_refused(service: Service) -> None:
    before = service.keys("log"), service.keys("inbox")

    result = purge(service.url, "--keep", "26h", "--table", "all")

    # The log's window (1d 7m 39s) passes; the inbox's (1d 4h 53m 40s) does not: nothing goes.
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: keeping 1d 2h of halfmq_inbox is too short")
    assert "16 redeliveries (max_reconsume_times)" in result.stderr
    assert "keep at least 1d 4h 53m 40s" in result.stderr
    assert "--max-reconsume-times" in result.stderr
    assert "nothing was deleted" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (service.keys("log"), service.keys("inbox")) == before

    refused = purge(service.url, "--keep", "90m", "--table", "log", "--json")
    assert refused.exit_code == 1
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "RETENTION_TOO_SHORT"
    assert "keep at least 1d 7m 39s" in error["message"]
    assert error["detail"]["minimum_seconds"] == 6 + 15 * 30 + 3 + DAY
    assert (service.keys("log"), service.keys("inbox")) == before


def test_the_brokers_timings_move_the_window(service: Service) -> None:
    """With fewer redeliveries and no margin, 2 hours are enough for the inbox (2 x 30 s + 10 s
    + 30 s); the same 2 hours are refused with the defaults."""
    assert purge(service.url, "--keep", "2h", "--table", "inbox").exit_code == 1
    fewer = ["--max-reconsume-times", "2", "--margin", "0"]
    answer = purged_json(service.url, "--keep", "2h", "--table", "inbox", *fewer)
    assert answer["tables"][0]["window_seconds"] == 100
    assert answer["tables"][0]["rows"] == 4  # the 6-day-old row too
    immunity = ["--check-immunity-seconds", "3700", "--margin", "1h"]
    longer = purge(service.url, "--keep", "2h", "--table", "log", *immunity)
    assert longer.exit_code == 1
    assert "1h 1m 40s (check_immunity_seconds)" in longer.stderr


def test_bad_options_are_usage_errors(service: Service) -> None:
    for args in (
        ["--keep", "7 days"],
        ["--margin", "soon"],
        ["--message-delay-level", "1s later"],
        ["--table", "outbox"],
        ["--batch-size", "0"],
    ):
        result = purge(service.url, *args)
        assert result.exit_code == 2, (args, result.output)
    assert len(service.keys("log")) == 14


def test_a_missing_database_or_table_is_one_line_and_exit_1(tmp_path: Path) -> None:
    nowhere = tmp_path / "typo.db"
    result = purge(f"sqlite:///{nowhere}")
    assert result.exit_code == 1
    assert f"error: no SQLite database at {nowhere}" in result.stderr
    assert not nowhere.exists()  # not created by the attempt

    other = tmp_path / "other.db"
    engine = create_engine(f"sqlite:///{other}")
    inbox.create(engine)
    engine.dispose()
    missing_log = purge(f"sqlite:///{other}", "--table", "log")
    assert missing_log.exit_code == 1
    assert "has no halfmq_local_transaction_log" in missing_log.stderr
    skipped = purge(f"sqlite:///{other}")
    assert skipped.exit_code == 0, skipped.output
    assert "halfmq_local_transaction_log: not in this database, skipped" in skipped.stdout

    bad = purge("nosuchdialect://user:pw@host/db")
    assert bad.exit_code == 1
    assert "error: cannot use nosuchdialect://user:***@host/db" in bad.stderr


def test_the_password_of_the_url_is_never_printed(pg_url: str) -> None:
    """Trust authentication ignores the password: a URL with one connects, and nothing shows it."""
    with_password = make_url(pg_url).set(password=SECRET).render_as_string(hide_password=False)
    Service(with_password).engine.dispose()

    runs = [
        purge(with_password, "--dry-run"),
        purge(with_password, "--json"),
        halfmq("framework", "purge", env={"HALFMQ_FRAMEWORK_DATABASE_URL": with_password}),
        purge(with_password, "--keep", "1h"),
    ]
    assert [run.exit_code for run in runs] == [0, 0, 0, 1]
    assert "postgres:***@127.0.0.1" in runs[0].stdout

    unknown_db = make_url(with_password).set(database="halfmq_no_such_db")
    failed = purge(unknown_db.render_as_string(hide_password=False))
    failed_json = purge(unknown_db.render_as_string(hide_password=False), "--json")
    assert [failed.exit_code, failed_json.exit_code] == [1, 1]
    assert "halfmq_no_such_db" in failed.stderr
    assert "postgres:***@127.0.0.1" in failed.stderr
    for run in [*runs, failed, failed_json]:
        assert SECRET not in run.output
