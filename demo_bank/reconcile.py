"""The nightly reconciliation job, run on the demo's own data when Spark is there."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo_bank.stores import Stores

TIMEOUT = 600


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    ran: bool
    note: str
    exit_code: int | None = None
    summary: dict[str, Any] | None = None
    seconds: float = 0.0


def spark_missing() -> str | None:
    """Why the job cannot run here, or ``None`` when pyspark and Java are both present."""
    if importlib.util.find_spec("pyspark") is None:
        return 'pyspark is not installed (pip install -e ".[spark]")'
    if shutil.which("java") is None:
        return "Java is not installed (the reconciliation needs Java 17)"
    return None


def run_reconcile(stores: Stores, out: Path, day: dt.date, log_path: Path) -> ReconcileOutcome:
    """``python -m spark_reconcile`` for ``day`` over the broker's store and both ledgers."""
    missing = spark_missing()
    if missing is not None:
        return ReconcileOutcome(False, f"skipped: {missing}")
    argv = [
        sys.executable,
        "-m",
        "spark_reconcile",
        "--date",
        day.isoformat(),
        "--database-url",
        stores.broker,
        "--ledger",
        f"bob={stores.bob}",
        "--ledger",
        f"smith={stores.smith}",
        "--out",
        str(out),
        "--jdbc-partitions",
        "2",
        "--shuffle-partitions",
        "4",
        "--driver-memory",
        "1g",
    ]
    began = dt.datetime.now()
    with log_path.open("ab") as log:
        try:
            process = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return ReconcileOutcome(False, f"gave up after {TIMEOUT}s (see {log_path})")
    seconds = (dt.datetime.now() - began).total_seconds()
    summary_path = out / "report" / f"date={day.isoformat()}" / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return ReconcileOutcome(
            False,
            f"the job exited {process.returncode} without a summary (see {log_path})",
            process.returncode,
            seconds=seconds,
        )
    return ReconcileOutcome(True, str(summary_path.parent), process.returncode, summary, seconds)
