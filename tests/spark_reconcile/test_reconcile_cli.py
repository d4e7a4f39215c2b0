"""The commands as the ``halfmq`` app mounts them: exit codes, the export's output, and the
message when pyspark is missing."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spark_reconcile import cli

ROOT = Path(__file__).resolve().parents[2]


def app() -> typer.Typer:
    halfmq = typer.Typer()
    halfmq.command("reconcile")(cli.reconcile)
    halfmq.command("export")(cli.export)
    return halfmq


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


@pytest.mark.spark
def test_export_then_reconcile_exits_2_on_critical(spark: Any, tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("pyspark")
    from test_reconcile_job import DAY, SPEC, plant_all

    store = f"sqlite:///{tmp_path / 'broker.db'}"
    banks = {b: f"sqlite:///{tmp_path / (b + '.db')}" for b in ("bob", "smith")}
    plant_all(spark, store, banks)
    runner = CliRunner()
    for day in (DAY, DAY + dt.timedelta(days=1)):
        done = runner.invoke(
            app(),
            [
                "export",
                "--date",
                day.isoformat(),
                "--database-url",
                store,
                "--out",
                str(tmp_path / "export"),
            ],
        )
        assert done.exit_code == 0, done.output
    assert (tmp_path / "export" / "messages" / f"date={DAY}" / "part-00000.parquet").exists()
    args = ["reconcile", "--date", DAY.isoformat(), "--parquet", str(tmp_path / "export")]
    args += ["--out", str(tmp_path / "out"), "--as-of", str(SPEC.as_of)]
    args += [f"--ledger={b}={u}" for b, u in banks.items()]
    done = runner.invoke(app(), args)
    assert done.exit_code == 2, done.output
    assert "critical" in done.output
    assert (tmp_path / "out" / "report" / f"date={DAY}" / "summary.md").exists()
