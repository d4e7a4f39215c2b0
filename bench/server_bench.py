"""The broker's per-request path under two ASGI servers, in one run: uvicorn (httptools and uvloop,
as ``halfmq broker serve`` runs it) against granian (a Rust HTTP server, ASGI interface).

    python bench/server_bench.py [--seconds 5] [--rounds 2] [--store sqlite|postgresql]
                                 [--servers uvicorn,granian] [--connections 64]

For each round and each server (alternating, so a drift of the shared machine falls on both) it
starts a real broker process on a fresh store and drives it as ``broker_bench.py`` does: the echo
route (FastAPI and the server, no store), single sends, and transactions (half + commit).  It
prints each rate, the broker's CPU per operation, and each figure as a ratio to uvicorn's in the
same round.  The broker under granian is the same app (``build_app``), one worker, uvloop; what
``halfmq broker serve`` adds around uvicorn (the bounded request head, the "ready" line) is not
part of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

from broker_bench import load, start_broker, wait_ready
from framework_bench import bench_broker
from loadgen import Result

PHASES = ("echo", "sends", "transactions")


def start_granian(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """The broker's app under granian: one worker, one runtime thread, uvloop."""
    subprocess.run(
        [sys.executable, "-m", "halfmq", "db", "upgrade", "--database-url", url],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "HALFMQ_DATABASE_URL": url, "HALFMQ_LOG_LEVEL": "warning"}
    granian = Path(sys.executable).with_name("granian")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(granian),
                "--interface",
                "asgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--runtime-threads",
                "1",
                "--loop",
                "uvloop",
                "--log-level",
                "warning",
                "--no-ws",
                "--factory",
                "granian_app:app",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).resolve().parent,
        )
    return wait_ready(port, process, log)


def serving_pid(process: subprocess.Popen[bytes]) -> int:
    """The process that runs the app: granian's worker is a child of its main process."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    found = children.read_text().split() if children.exists() else []
    return int(found[0]) if found else process.pid


def one_server(server: str, store: str, seconds: float, connections: int) -> dict[str, Result]:
    start = start_broker if server == "uvicorn" else start_granian
    with bench_broker(store, "server", start) as broker:
        pid = serving_pid(broker.process)
        return asyncio.run(load(broker.port, seconds, connections, PHASES, pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--servers", default="uvicorn,granian")
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    servers = [s.strip() for s in args.servers.split(",")]
    for round_ in range(1, args.rounds + 1):
        results = {s: one_server(s, args.store, args.seconds, args.connections) for s in servers}
        load_avg = os.getloadavg()[0]
        print(
            f"\n== round {round_}, {args.store}, {args.connections} connections, load {load_avg:.1f}"
        )
        print(f"{'server':<10}{'what':<14}{'per second':>12}{'x uvicorn':>11}{'x echo':>9}"
              f"{'p50 ms':>9}{'broker CPU us/op':>18}")  # fmt: skip
        for server, found in results.items():
            for name, result in found.items():
                done = result.rate * result.seconds
                cpu = (result.probed or 0.0) / done * 1e6 if done else float("nan")
                base = results[servers[0]][name].rate
                echo = found["echo"].rate
                print(f"{server:<10}{name:<14}{result.rate:>12,.0f}{result.rate / base:>11.2f}"
                      f"{result.rate / echo:>9.2f}{result.percentile(0.5):>9.1f}{cpu:>18,.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
