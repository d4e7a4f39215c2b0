"""The nightly reconciliation job, run on the demo's own data when Spark is there.

On SQLite (the default) nothing goes over JDBC: ``halfmq export`` writes the run's days of the
broker's store and of both ledgers as Parquet (pyarrow, from PyPI), and the job reads that -- so a
machine needs Java for Spark, but no driver jar from a system package manager.  On PostgreSQL the
job reads the three databases over JDBC, as it does in production.

Without a Java Spark can start -- none at all, one older than 17 (pyspark 4 needs 17), or a
``java`` that does not answer ``java -version`` (macOS's ``/usr/bin/java`` stub without a JDK) --
the job is skipped, never failed: the run's proof does not depend on it."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo_bank.stores import Stores

TIMEOUT = 600
JAVA_NEEDED = 17  # pyspark 4 starts no JVM older than this
JAVA_VERSION_TIMEOUT = 10.0  # seconds for ``java -version`` to answer
JAVA_MISSING = f"Java is not installed (Spark needs Java {JAVA_NEEDED})"
GET_JAVA = (
    "to get Java 17: Debian/Ubuntu `sudo apt install openjdk-17-jre-headless`, "
    "Fedora `sudo dnf install java-17-openjdk-headless`, macOS `brew install openjdk@17` "
    "(or set JAVA_HOME); then run `halfmq demo` again"
)
PYSPARK_MISSING = 'pyspark is not installed (pip install -e ".[spark]")'
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    ran: bool
    note: str
    exit_code: int | None = None
    summary: dict[str, Any] | None = None
    seconds: float = 0.0
    skipped: bool = False  # not run because this machine lacks pyspark or Java: not a failure
    hint: str = ""  # how to make it run next time


def java_program() -> str | None:
    """The ``java`` Spark would start: ``$JAVA_HOME/bin/java`` (what pyspark's launcher uses
    first), else ``java`` on the PATH; ``None`` when there is neither."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_major(output: str) -> int | None:
    """The major version in ``java -version``'s output: 17 of ``openjdk version "17.0.15"``, 21 of
    ``"21"``, 8 of ``java version "1.8.0_381"``; ``None`` when it names no version."""
    found = _VERSION.search(output)
    if found is None:
        return None
    major = int(found.group(1))
    if major == 1 and found.group(2) is not None:  # Java 8 and older: "1.8.0_381"
        return int(found.group(2))
    return major


def java_problem() -> str | None:
    """Why Spark cannot start a JVM here, in one line -- no ``java``, ``java -version`` failing
    (exit code not 0, no answer within ``JAVA_VERSION_TIMEOUT``, no version in what it printed),
    or a Java older than 17 -- or ``None`` when ``java -version`` says 17 or newer.

    A ``java`` that merely exists proves nothing: macOS has a ``/usr/bin/java`` stub without a
    JDK, which exits 1 with "Unable to locate a Java Runtime"."""
    java = java_program()
    if java is None:
        return JAVA_MISSING
    failed = f"`{java} -version` failed"
    needs = f"(Spark needs Java {JAVA_NEEDED})"
    try:
        done = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=JAVA_VERSION_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{failed}: no answer in {JAVA_VERSION_TIMEOUT:g} s {needs}"
    except OSError as error:
        return f"{failed}: {error.strerror or error} {needs}"
    said = _first_line(done.stderr + "\n" + done.stdout)
    if done.returncode != 0:
        quoted = f' "{said}"' if said else ""
        return f"{failed}: exit code {done.returncode}{quoted} {needs}"
    major = java_major(done.stderr + "\n" + done.stdout)
    if major is None:
        return f'{failed}: no version in "{said}" {needs}'
    if major < JAVA_NEEDED:
        return f"Java {major} ({java}) is too old {needs}"
    return None


def java_found() -> bool:
    """Whether Spark can start a JVM: ``java -version`` answers 17 or newer."""
    return java_problem() is None


def _first_line(text: str, limit: int = 120) -> str:
    """The first line a program printed, short, its brackets made round: the demo's console would
    take ``[warning]`` for markup."""
    line = next((each.strip() for each in text.splitlines() if each.strip()), "")
    line = line.replace("[", "(").replace("]", ")")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def spark_missing() -> str | None:
    """Why the job cannot run here, or ``None`` when pyspark and a Java 17+ are both present."""
    if importlib.util.find_spec("pyspark") is None:
        return PYSPARK_MISSING
    return java_problem()


def run_reconcile(
    stores: Stores, out: Path, day: dt.date, log_path: Path, first_day: dt.date | None = None
) -> ReconcileOutcome:
    """``python -m spark_reconcile`` for ``day`` over the broker's store and both ledgers: their
    Parquet export (of the days from ``first_day`` to ``day``) on SQLite, JDBC otherwise."""
    missing = spark_missing()
    if missing is not None:
        hint = "" if missing == PYSPARK_MISSING else GET_JAVA
        return ReconcileOutcome(False, f"skipped: {missing}", skipped=True, hint=hint)
    began = dt.datetime.now()
    if stores.broker.startswith("sqlite"):
        export = out / "export"
        for each in _days(first_day or day, day):
            code = _call(_export_argv(stores, export, each), log_path)
            if code != 0:
                return ReconcileOutcome(
                    False, f"the Parquet export exited {code} (see {log_path})", code
                )
        inputs = [
            "--parquet",
            str(export),
            "--ledger",
            f"bob=parquet:{export / 'ledgers' / 'bob'}",
            "--ledger",
            f"smith=parquet:{export / 'ledgers' / 'smith'}",
        ]
    else:
        inputs = [*_database_inputs(stores), "--jdbc-partitions", "2"]
    argv = [
        sys.executable,
        "-m",
        "spark_reconcile",
        "--date",
        day.isoformat(),
        *inputs,
        "--out",
        str(out),
        "--shuffle-partitions",
        "4",
        "--driver-memory",
        "1g",
    ]
    code = _call(argv, log_path)
    seconds = (dt.datetime.now() - began).total_seconds()
    if code is None:
        return ReconcileOutcome(False, f"gave up after {TIMEOUT}s (see {log_path})")
    summary_path = out / "report" / f"date={day.isoformat()}" / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return ReconcileOutcome(
            False,
            f"the job exited {code} without a summary (see {log_path})",
            code,
            seconds=seconds,
        )
    return ReconcileOutcome(True, str(summary_path.parent), code, summary, seconds)


def _days(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]


def _export_argv(stores: Stores, export: Path, day: dt.date) -> list[str]:
    return [
        sys.executable,
        "-m",
        "halfmq",
        "export",
        "--date",
        day.isoformat(),
        *_database_inputs(stores),
        "--out",
        str(export),
    ]


def _database_inputs(stores: Stores) -> list[str]:
    """The broker's store and both banks' ledgers, as the export and the job both take them."""
    return [
        "--database-url", stores.broker,
        "--ledger", f"bob={stores.bob}",
        "--ledger", f"smith={stores.smith}",
    ]  # fmt: skip


def _call(argv: list[str], log_path: Path) -> int | None:
    """Runs ``argv`` with its output appended to the log; its exit code, ``None`` on timeout."""
    with log_path.open("ab") as log:
        try:
            done = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return None
    return done.returncode
