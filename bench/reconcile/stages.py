"""Executor time per stage of one Spark application, from its event log (the figures the Spark
UI's stage page shows, summed over tasks), so runs can be compared on a shared, noisy machine by
the work they did rather than by wall time.

    .venv/bin/python bench/reconcile/stages.py /tmp/ev/local-1700000000000   # one event log
    .venv/bin/python bench/reconcile/stages.py /tmp/ev                       # the newest in a dir

``run.py --event-log DIR`` writes the job's event logs into DIR.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Stage:
    stage_id: int
    name: str = ""
    tasks: int = 0
    run_ms: int = 0  # executor run time, summed over tasks
    cpu_ms: float = 0.0  # executor CPU time, summed over tasks
    gc_ms: int = 0
    input_rows: int = 0
    input_bytes: int = 0
    shuffle_read_rows: int = 0
    shuffle_write_rows: int = 0
    shuffle_write_bytes: int = 0
    spill_bytes: int = 0


def _lines(path: Path) -> Iterator[str]:
    if path.suffix == ".zstd":  # Spark 4 compresses event logs with zstd by default
        done = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True)
        yield from done.stdout.decode().splitlines()
        return
    with path.open() as f:
        yield from f


def events(log: Path) -> Iterator[dict[str, Any]]:
    """The events of one application's log: a file, or a rolling ``eventlog_v2_*`` directory."""
    if log.is_file():
        parts = [log]
    else:
        parts = sorted(log.glob("events_*"), key=lambda p: int(p.name.split("_")[1]))
    for part in parts:
        for line in _lines(part):
            if line.strip():
                yield json.loads(line)


@dataclasses.dataclass
class App:
    """The application's span and its jobs, from the same log."""

    jobs: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    first_job_ms: int = 0  # when the first job was submitted


def app(path: Path) -> App:
    found = App()
    for event in events(path):
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            found.started_ms = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            found.ended_ms = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            found.jobs += 1
            if not found.first_job_ms:
                found.first_job_ms = event["Submission Time"]
    return found


@dataclasses.dataclass
class Job:
    job_id: int
    call_site: str = ""
    stages: int = 0  # stages of the job that ran (the others were skipped: shuffle reused)
    tasks: int = 0
    submitted_ms: int = 0
    ended_ms: int = 0


def jobs(path: Path) -> list[Job]:
    """Each job: where the driver started it, how many of its stages and tasks ran, and when."""
    found: dict[int, Job] = {}
    stage_job: dict[int, int] = {}
    for event in events(path):
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            job = found.setdefault(event["Job ID"], Job(event["Job ID"]))
            job.submitted_ms = event["Submission Time"]
            props = event.get("Properties") or {}
            job.call_site = props.get("callSite.short", "") or ""
            for stage_id in event.get("Stage IDs", []):
                stage_job[stage_id] = job.job_id
        elif kind == "SparkListenerJobEnd":
            found.setdefault(event["Job ID"], Job(event["Job ID"])).ended_ms = event[
                "Completion Time"
            ]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            if info["Stage ID"] in stage_job:
                job = found[stage_job[info["Stage ID"]]]
                job.stages += 1
                job.tasks += info.get("Number of Tasks", 0)
    return sorted(found.values(), key=lambda j: j.job_id)


def job_table(found: list[Job], started_ms: int) -> str:
    lines = [f"{'job':>4} {'at s':>7} {'took s':>7} {'stages':>6} {'tasks':>5}  call site"]
    for j in found:
        lines.append(
            f"{j.job_id:>4} {(j.submitted_ms - started_ms) / 1000:>7.1f} "
            f"{(j.ended_ms - j.submitted_ms) / 1000:>7.1f} {j.stages:>6} {j.tasks:>5}  "
            f"{j.call_site[:70]}"
        )
    return "\n".join(lines)


def stages(path: Path) -> list[Stage]:
    found: dict[int, Stage] = {}
    for event in events(path):
        kind = event["Event"]
        if kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stage = found.setdefault(info["Stage ID"], Stage(info["Stage ID"]))
            stage.name = info["Stage Name"]
        elif kind == "SparkListenerTaskEnd":
            metrics = event.get("Task Metrics") or {}
            stage = found.setdefault(event["Stage ID"], Stage(event["Stage ID"]))
            stage.tasks += 1
            stage.run_ms += metrics.get("Executor Run Time", 0)
            stage.cpu_ms += metrics.get("Executor CPU Time", 0) / 1e6
            stage.gc_ms += metrics.get("JVM GC Time", 0)
            stage.spill_bytes += metrics.get("Disk Bytes Spilled", 0)
            read = metrics.get("Input Metrics", {})
            stage.input_rows += read.get("Records Read", 0)
            stage.input_bytes += read.get("Bytes Read", 0)
            shuffled = metrics.get("Shuffle Read Metrics", {})
            stage.shuffle_read_rows += shuffled.get("Total Records Read", 0)
            written = metrics.get("Shuffle Write Metrics", {})
            stage.shuffle_write_rows += written.get("Shuffle Records Written", 0)
            stage.shuffle_write_bytes += written.get("Shuffle Bytes Written", 0)
    return sorted(found.values(), key=lambda s: s.stage_id)


def _finished(log: Path) -> bool:
    if log.is_dir():
        return not any(p.name.endswith(".inprogress") for p in log.glob("appstatus_*"))
    return not log.name.endswith(".inprogress")


def newest(path: Path) -> Path:
    """``path`` itself when it is one application's log, else the newest finished log in it."""
    if path.is_file() or path.name.startswith("eventlog_v2_"):
        return path
    logs = [p for p in path.iterdir() if not p.name.startswith(".") and _finished(p)]
    if not logs:
        raise SystemExit(f"no finished event log in {path}")
    return max(logs, key=lambda p: p.stat().st_mtime)


def table(found: list[Stage]) -> str:
    lines = [
        f"{'stage':>5} {'tasks':>5} {'run s':>8} {'cpu s':>8} {'gc s':>6} {'in rows':>11} "
        f"{'shuf rd rows':>12} {'shuf wr rows':>12} {'shuf wr MB':>10} {'spill MB':>8}  name"
    ]
    for s in found:
        lines.append(
            f"{s.stage_id:>5} {s.tasks:>5} {s.run_ms / 1000:>8.1f} {s.cpu_ms / 1000:>8.1f} "
            f"{s.gc_ms / 1000:>6.1f} {s.input_rows:>11,} {s.shuffle_read_rows:>12,} "
            f"{s.shuffle_write_rows:>12,} {s.shuffle_write_bytes / 1e6:>10.1f} "
            f"{s.spill_bytes / 1e6:>8.1f}  {s.name[:60]}"
        )
    run = sum(s.run_ms for s in found) / 1000
    cpu = sum(s.cpu_ms for s in found) / 1000
    shuffled = sum(s.shuffle_write_bytes for s in found) / 1e6
    lines.append(
        f"total: {len(found)} stages, {sum(s.tasks for s in found)} tasks, executor run time "
        f"{run:.1f} s, executor CPU time {cpu:.1f} s, shuffle written {shuffled:.1f} MB"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="an event log, or a directory of them (newest)")
    parser.add_argument("--jobs", action="store_true", help="list the jobs too")
    opts = parser.parse_args()
    path = newest(opts.log)
    print(path)
    print(table(stages(path)))
    span = app(path)
    if span.started_ms and span.ended_ms:
        print(
            f"application: {span.jobs} jobs, {(span.ended_ms - span.started_ms) / 1000:.1f} s "
            f"from its start to its end, the first job "
            f"{(span.first_job_ms - span.started_ms) / 1000:.1f} s after the start"
        )
    if opts.jobs:
        print(job_table(jobs(path), span.started_ms))


if __name__ == "__main__":
    main()
