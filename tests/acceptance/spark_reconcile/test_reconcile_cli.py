"""The commands' option parsing, and the message when pyspark is missing (their runs are in
``test_reconcile_job``)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from spark_reconcile import cli
from spark_reconcile.config import ReconcileConfig

ROOT = Path(__file__).resolve().parents[3]


def test_durations() -> None:
    assert cli.parse_duration("90") == 90_000
    assert cli.parse_duration("15m") == 900_000
    assert cli.parse_duration("1.5h") == 5_400_000
    assert cli.parse_duration("250ms") == 250
    with pytest.raises(typer.BadParameter):
        cli.parse_duration("soon")


def test_as_of_and_ledgers(tmp_path: Path) -> None:
    assert cli.parse_as_of("2026-11-21T00:30:00") == 1795221000000
    assert cli.parse_as_of("1795221000000") == 1795221000000
    mapping = tmp_path / "ledgers.yaml"
    mapping.write_text(
        "- {name: acme, url: 'sqlite:///acme.db', table: journal, direction_column: null}\n"
    )
    sources = cli.ledger_sources(["bob=sqlite:///bob.db"], mapping)
    assert [(s.name, s.table, s.direction_column) for s in sources] == [
        ("bob", "transfers", "direction"),
        ("acme", "journal", None),
    ]
    with pytest.raises(typer.BadParameter):
        cli.ledger_sources(["bob"], None)


def test_spark_settings_and_where_the_job_runs() -> None:
    assert cli.spark_settings(["spark.executor.memory=2g", "spark.x=a=b"]) == (
        ("spark.executor.memory", "2g"),
        ("spark.x", "a=b"),
    )
    for wrong in ("spark.executor.memory", "=2g"):
        with pytest.raises(typer.BadParameter):
            cli.spark_settings([wrong])
    day = dt.date(2026, 11, 20)
    with pytest.raises(ValueError, match="not both"):
        ReconcileConfig(day, "out", parquet="x", master="spark://h:7077", remote="sc://h:15002")
    with pytest.raises(ValueError, match=r"sc://HOST:PORT"):
        ReconcileConfig(day, "out", parquet="x", remote="h:15002")
    assert ReconcileConfig(day, "out", parquet="x", remote="sc://h:15002").remote == "sc://h:15002"


def test_reconcile_without_pyspark_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from typer.testing import CliRunner\n"
        "import typer\n"
        "from spark_reconcile import cli\n"
        "app = typer.Typer(); app.command('reconcile')(cli.reconcile); app.command('x')(cli.export)\n"
        "r = CliRunner().invoke(app, ['reconcile', '--date', '2026-11-20'])\n"
        "print(r.output); sys.exit(r.exit_code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert 'pip install -e ".[spark]"' in done.stdout + done.stderr


def test_an_unusable_policy_file_stops_the_job_with_one_line(tmp_path: Path) -> None:
    """Exit 2 and the reason, before any Spark session is built."""
    pytest.importorskip("pyspark")
    from typer.testing import CliRunner

    policy = tmp_path / "policy.yml"
    policy.write_text("kinds:\n  stuck_half: {max_age: someday}\n")
    app = typer.Typer()
    app.command("reconcile")(cli.reconcile)
    args = [
        "--date",
        "2026-11-20",
        "--parquet",
        str(tmp_path),
        "--policy",
        str(policy),
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2
    text = " ".join(done.output.split())
    assert "cannot reconcile" in text
    assert "kinds.stuck_half.max_age" in text
    assert "Traceback" not in done.output
