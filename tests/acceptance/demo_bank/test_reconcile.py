"""``halfmq demo`` on a machine like a new user's: no apt-get (nor sudo) on the PATH, no JDBC
driver jar anywhere the job looks -- and then no Java either.  The demo runs as a real process
with every fault on; its reconciliation reads the SQLite stores through their Parquet export.
Without Java it says so in one line, skips the reconciliation (not a failure) and still checks
every invariant."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spark_reconcile.jdbc import DRIVERS, JAR_DIR_ENV, JARS_ENV, MissingDriverError, find_jars
from tests.acceptance.demo_bank.test_runner import N, seed_with_every_fault

pytestmark = pytest.mark.slow

PACKAGE_MANAGERS = frozenset({"apt-get", "apt", "dpkg", "sudo", "dnf", "yum", "brew"})
JAVA = frozenset({"java"})
DEMO_TIMEOUT = 600


def shadow_path(folder: Path, leave_out: frozenset[str]) -> str:
    """A PATH of one folder holding a link to every program on this PATH but ``leave_out``."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for program in os.scandir(directory):
            link = folder / program.name
            if program.name in leave_out or link.exists():
                continue
            if program.is_file() and os.access(program.path, os.X_OK):
                link.symlink_to(program.path)
    return str(folder)


def run_demo(tmp_path: Path, leave_out: frozenset[str]) -> tuple[int, str]:
    """``halfmq demo`` at N transfers with every fault, on SQLite, with a PATH without
    ``leave_out`` and the JDBC jars pointed at a folder that does not exist."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", JARS_ENV)}
    env |= {
        "PATH": shadow_path(tmp_path / "bin", leave_out),
        JAR_DIR_ENV: str(tmp_path / "no-jars-here"),
        "COLUMNS": "250",
    }
    if "java" not in leave_out and "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    argv = [sys.executable, "-m", "halfmq", "demo", "--transfers", str(N)]
    argv += ["--seed", str(seed_with_every_fault()), "--concurrency", "8"]
    argv += ["--settle-timeout", "60", "--dir", str(tmp_path / "run")]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT, check=False
    )
    return done.returncode, done.stdout + done.stderr


def test_the_jdbc_route_is_closed_by_the_missing_jar_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the demo tests below set really takes the jars away: a JDBC read would fail."""
    monkeypatch.delenv(JARS_ENV, raising=False)
    monkeypatch.setenv(JAR_DIR_ENV, str(tmp_path / "no-jars-here"))
    with pytest.raises(MissingDriverError, match="no-jars-here"):
        find_jars([DRIVERS["sqlite"]])


def test_demo_reconciles_sqlite_without_apt_get_or_jdbc_jars(tmp_path: Path) -> None:
    code, output = run_demo(tmp_path, PACKAGE_MANAGERS)
    assert code == 0, output
    assert "FAIL" not in output, output
    assert "every invariant holds · reconciliation clean" in output, output
    day_dirs = list((tmp_path / "run" / "reconcile" / "report").glob("date=*"))
    assert len(day_dirs) == 1, output
    summary = json.loads((day_dirs[0] / "summary.json").read_text())
    assert summary["status"] == "clean"
    assert summary["source"].startswith("parquet:")
    assert summary["ledgers"] == ["bob", "smith"]
    # The poison transfer was dead-lettered, resent by the run and credited: resolved, not a
    # warning -- in the demo's report and in the job's summary alike.
    assert summary["counts"]["dead_letter_resolved"] == {"severity": "info", "count": 1}
    assert summary["counts"]["dead_lettered"]["count"] == 0
    assert "dead letter resolved (info, nothing to do)" in output, output
    # Both ledgers went through the export, with rows (a ledger read empty would not be clean).
    # The export's summary line wraps at the console's width, wherever the paths put the break.
    log = (tmp_path / "run" / "reconcile.log").read_text()
    exported = {bank: int(n) for bank, n in re.findall(r"ledger\s+(bob|smith)\s+(\d+)", log)}
    assert exported.keys() == {"bob", "smith"}, log
    assert min(exported.values()) > 0, log
    # The broker's log says what an operator wants: its start, when it is ready, its check
    # rounds (it is restarted once: two starts).
    broker_log = (tmp_path / "run" / "broker.log").read_text()
    assert broker_log.count("broker starting: halfmq") == 2, broker_log
    assert "broker ready on" in broker_log, broker_log
    assert "check round:" in broker_log, broker_log


def test_demo_without_java_says_so_once_and_checks_every_invariant(tmp_path: Path) -> None:
    code, output = run_demo(tmp_path, PACKAGE_MANAGERS | JAVA)
    assert code == 0, output
    notes = [line for line in output.splitlines() if line.startswith("note ")]
    assert notes == [
        "note Java is not installed (Spark needs Java 17): the reconciliation will be skipped; "
        "everything else runs and every invariant is checked"
    ], output
    assert output.count("PASS") == 6, output
    assert "FAIL" not in output, output
    assert "reconciliation: skipped, not failed -- Java is not installed" in output, output
    assert "apt install openjdk-17-jre-headless" in output, output
    assert "dnf install java-17-openjdk-headless" in output, output
    assert "brew install openjdk@17" in output, output
    assert "every invariant holds · reconciliation skipped (not failed)" in output, output
    assert not (tmp_path / "run" / "reconcile").exists(), output
