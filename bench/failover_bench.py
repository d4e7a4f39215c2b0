"""PostgreSQL failovers in a row under load: what the clients lose (nothing, it must be), how long
they are refused, and the throughput before and after.

A primary and its synchronous standby (``drills.pg_cluster``, the machine's PostgreSQL binaries on
free loopback ports), two brokers on the multi-host URL, raw HTTP workers and the framework's
producer and consumer (``drills.failover``).  Each round:

1. the load runs; the throughput is measured over ``--measure`` seconds (synchronous standby on);
2. the primary is SIGKILLed (its whole process group), and ``--detect`` seconds later the standby
   is promoted (``pg_ctl promote``; it runs alone until step 3);
3. the window: from the kill to the first write acknowledged that was asked after it;
4. the dead node is rebuilt from the new primary (``pg_basebackup``) as its synchronous standby,
   under load; the throughput is measured again;
5. the load stops, everything settles (check-backs, consumption), and the loss checker reads the
   store and what the consumer group consumed: lost, wrong (rolled back, delivered), double
   (resolved or stored twice) -- counted over everything so far, so a round's figure is what it
   added.

    python bench/failover_bench.py [--failovers 5] [--workers 12] [--detect 1.0] [--measure 5]

Exits non-zero when anything acknowledged was lost, anything rolled back delivered or resolved
twice, or a broker answered 500.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from drills.failover import WRITES, Drill, Verdict


@dataclass(frozen=True, slots=True)
class Round:
    acked: int
    lost: int
    wrong: int
    double: int
    unresolved: int
    window: float
    recovery: float
    refused: int  # 503 answers to writes between the kill and the first acknowledged write
    errors: Counter[int]  # write answers of the round neither 2xx nor 503 (0: no answer)
    before: float  # acknowledged writes a second
    after: float
    rebuild: float  # seconds to rebuild the standby, under load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--workers", type=int, default=12, help="raw HTTP clients")
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--detect", type=float, default=1.0, help="seconds from kill to promote")
    parser.add_argument("--measure", type=float, default=5.0, help="seconds of each rate")
    parser.add_argument("--logs", type=Path, help="keep the brokers' logs in this directory")
    args = parser.parse_args()

    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="halfmq-failover-") as scratch:
        workdir = args.logs or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with Drill(Path(workdir), brokers=args.brokers, workers=args.workers) as drill:
            print(f"cluster and {args.brokers} brokers up in {time.monotonic() - started:.1f} s")
            seen = Verdict(0, [], [], [], [])
            for n in range(1, args.failovers + 1):
                result, seen = _round(drill, args.detect, args.measure, seen)
                rounds.append(result)
                print(f"round {n}: {_row(n, result)}", flush=True)
            logs = [broker.log_path.read_text(errors="replace") for broker in drill.brokers]
            scraped = [httpx.get(f"{url}/metrics", timeout=10).text for url in drill.urls]
    print()
    _table(rounds)
    for n, text in enumerate(scraped):
        print(f"\nbroker {n}'s /metrics at the end, its 5xx answers and readiness:")
        for line in text.splitlines():
            if line.startswith("halfmq_ready ") or (
                line.startswith("halfmq_request_seconds_count") and 'status_class="5xx"' in line
            ):
                print(f"    {line}")
    tracebacks = sum(log.count("Traceback") for log in logs)
    for log in logs:
        for at in [m.start() for m in re.finditer("Traceback", log)][:3]:
            print("\n" + log[max(0, log.rfind("\n", 0, at - 1)) : at + 3000])
    print(f"\nbroker log lines with a traceback: {tracebacks}")
    bad = sum(r.lost + r.wrong + r.double + r.unresolved + r.errors[500] for r in rounds)
    return 1 if bad or tracebacks else 0


def _round(drill: Drill, detect: float, measure: float, seen: Verdict) -> tuple[Round, Verdict]:
    ledger = drill.ledger
    began = time.monotonic()
    drill.start_load()
    time.sleep(1.0)  # the clients' connections open
    mark = time.monotonic()
    time.sleep(measure)
    before = ledger.acknowledged(since=mark, until=mark + measure) / measure
    failover = drill.failover(detect_seconds=detect)
    rebuilding = time.monotonic()
    drill.rebuild_standby()
    rebuild = time.monotonic() - rebuilding
    mark = time.monotonic()
    time.sleep(measure)
    after = ledger.acknowledged(since=mark, until=mark + measure) / measure
    drill.stop_load()
    ended = time.monotonic()
    drill.settle(timeout=90)
    verdict = drill.check()
    with ledger.lock:
        writes = [a for a in ledger.answers if a.kind in WRITES and began <= a.done <= ended]
    errors = Counter(a.status for a in writes if a.status != 503 and not 200 <= a.status < 300)
    refused = sum(
        1 for a in writes if a.status == 503 and failover.killed <= a.done <= failover.first_ok
    )
    result = Round(
        acked=ledger.acknowledged(since=began, until=ended + 1),
        lost=len(verdict.lost) - len(seen.lost),
        wrong=len(verdict.wrong) - len(seen.wrong),
        double=len(verdict.double) - len(seen.double),
        unresolved=len(verdict.unresolved),
        window=failover.window,
        recovery=failover.recovery,
        refused=refused,
        errors=errors,
        before=before,
        after=after,
        rebuild=rebuild,
    )
    for line in (verdict.lost + verdict.wrong + verdict.double + verdict.unresolved)[:10]:
        print(f"  ! {line}")
    return result, verdict


_HEADER = (
    "| failover | acknowledged | lost | wrong | double | window s | of which brokers s "
    "| refused (503) | other errors | writes/s before | writes/s after | standby rebuilt in s |"
)


def _row(n: int, r: Round) -> str:
    errors = ", ".join(f"{n} x {status}" for status, n in sorted(r.errors.items())) or "0"
    return (
        f"| {n} | {r.acked:,} | {r.lost} | {r.wrong} | {r.double} | {r.window:.2f} "
        f"| {r.recovery:.2f} | {r.refused} | {errors} | {r.before:.0f} | {r.after:.0f} "
        f"| {r.rebuild:.1f} |"
    )


def _table(rounds: list[Round]) -> None:
    print(_HEADER)
    print("|---" * (_HEADER.count("|") - 1) + "|")
    for n, r in enumerate(rounds, 1):
        print(_row(n, r))


if __name__ == "__main__":
    sys.exit(main())
