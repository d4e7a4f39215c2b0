"""``halfmq broker list`` against a real broker process, on both stores: the broker has recorded
itself in its store, and is listed live with the address it listens on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from halfmq.cli import app
from tests.support import BrokerProcess, free_port, wait_until

runner = CliRunner()


def test_the_broker_lists_itself_live(migrated_url: str, tmp_path: Path) -> None:
    port = free_port()
    process = BrokerProcess(migrated_url, port, tmp_path / "broker.log",
                            "--broker-id", "b-cli", "--no-scheduler")  # fmt: skip
    process.start()
    try:
        env = {"HALFMQ_BROKER": process.url, "COLUMNS": "250"}

        def brokers() -> list[dict[str, Any]]:
            answer = runner.invoke(app, ["broker", "list", "--json"], env=env)
            assert answer.exit_code == 0, answer.output
            found: list[dict[str, Any]] = json.loads(answer.stdout)["brokers"]
            return found

        wait_until(lambda: bool(brokers()), 10, "the broker's first beat")  # at its start
        [listed] = brokers()
        assert listed["broker_id"] == "b-cli"
        assert listed["address"] == f"127.0.0.1:{port}"
        assert listed["live"] is True
        shown = runner.invoke(app, ["broker", "list"], env=env)
        assert shown.exit_code == 0, shown.output
        assert "b-cli" in shown.stdout
        assert "live" in shown.stdout
    finally:
        process.stop()
