"""A real producer process for the check-back tests, speaking the broker's REST contract directly
(the client framework is not part of these tests).

    python -m tests.producer_app half  BROKER GROUP LOCAL_DB KEY --effect yes|no
        heartbeat, send a half, run the "local transaction" (insert KEY into LOCAL_DB when
        --effect yes), print the transaction id, then hang -- the test kills it with SIGKILL.
    python -m tests.producer_app serve BROKER GROUP LOCAL_DB --mode push|pull [--answer local|UNKNOWN|COMMIT]
        a new instance of GROUP: heartbeats and answers checks from LOCAL_DB (COMMIT when the key
        is there, ROLLBACK when not), by push (an HTTP server on --port with a listen --backlog)
        or pull (long-poll).  Every check it gets is appended to LOCAL_DB's ``checks`` table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


def local_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS checks (transaction_id TEXT, check_times INT, at REAL, client TEXT)"
    )
    return conn


def answer_for(conn: sqlite3.Connection, check: dict[str, Any], fixed: str) -> str:
    if fixed != "local":
        return fixed
    key = check["keys"][0]
    found = conn.execute("SELECT 1 FROM effects WHERE key = ?", (key,)).fetchone()
    return "COMMIT" if found else "ROLLBACK"


def half(args: argparse.Namespace) -> None:
    conn = local_db(args.local_db)
    client = httpx.Client(base_url=args.broker, timeout=10)
    client.post(
        f"/v1/producer-groups/{args.group}/heartbeat",
        json={"client_id": f"doomed-{uuid.uuid4().hex[:6]}", "topics": [args.topic]},
    ).raise_for_status()
    response = client.post(
        "/v1/transactions",
        json={
            "topic": args.topic,
            "producer_group": args.group,
            "body": "transfer",
            "keys": [args.key],
        },
    )
    response.raise_for_status()
    if args.effect == "yes":
        conn.execute("INSERT INTO effects VALUES (?)", (args.key,))
    print(response.json()["transaction_id"], flush=True)
    time.sleep(3600)  # the commit never comes: the test kills this process


def serve(args: argparse.Namespace) -> None:
    conn = local_db(args.local_db)
    client_id = args.client_id or f"{args.mode}-{uuid.uuid4().hex[:6]}"
    lock = threading.Lock()

    def record(check: dict[str, Any]) -> None:
        with lock:
            conn.execute(
                "INSERT INTO checks VALUES (?, ?, ?, ?)",
                (check["transaction_id"], check["check_times"], time.time(), client_id),
            )

    callback_url = None
    if args.mode == "push":

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                check = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                record(check)
                time.sleep(args.delay)
                body = json.dumps({"state": answer_for(conn, check, args.answer)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = args.backlog  # a plain server's listen backlog: 5 by default

        server = Server(("127.0.0.1", args.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        callback_url = f"http://127.0.0.1:{server.server_address[1]}/check"

    client = httpx.Client(base_url=args.broker, timeout=30)

    def heartbeat_forever() -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                client.post(
                    f"/v1/producer-groups/{args.group}/heartbeat",
                    json={
                        "client_id": client_id,
                        "callback_url": callback_url,
                        "topics": [args.topic],
                    },
                )
            time.sleep(0.5)

    threading.Thread(target=heartbeat_forever, daemon=True).start()
    print(client_id, flush=True)
    if args.mode == "push":
        time.sleep(3600)
        return
    while True:  # pull: long-poll and answer with from_check
        try:
            checks = client.get(
                f"/v1/producer-groups/{args.group}/checks",
                params={"client_id": client_id, "max": 32, "wait_seconds": 2},
            ).json()["checks"]
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        for check in checks:
            record(check)
            state = answer_for(conn, check, args.answer)
            if state in ("COMMIT", "ROLLBACK"):
                verb = "commit" if state == "COMMIT" else "rollback"
                client.post(
                    f"/v1/transactions/{check['transaction_id']}/{verb}",
                    json={"producer_group": args.group, "from_check": True},
                )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("half", "serve"):
        p = sub.add_parser(name)
        p.add_argument("broker")
        p.add_argument("group")
        p.add_argument("local_db")
        p.add_argument("--topic", default="transfers")
        if name == "half":
            p.add_argument("key")
            p.add_argument("--effect", choices=["yes", "no"], required=True)
        else:
            p.add_argument("--mode", choices=["push", "pull"], required=True)
            p.add_argument("--answer", default="local")
            p.add_argument("--delay", type=float, default=0.0)
            p.add_argument("--client-id", default=None)
            p.add_argument("--port", type=int, default=0, help="push: the check server's port")
            p.add_argument("--backlog", type=int, default=5, help="push: its listen backlog")
    args = parser.parse_args()
    {"half": half, "serve": serve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
