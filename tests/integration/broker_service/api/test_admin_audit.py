"""The audit log records every admin action, whatever the path (issue 29, item 13): REST, the
CLI (which speaks REST) and the console write the same rows -- the account, the address, the
action, its subject and its result -- and a producer's own traffic writes none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support import BOB, OPERATOR, SMITH, BrokerApp, BrokerProcess, free_port, signed


async def _entries(broker: BrokerApp) -> list[tuple[str, str, str, str, dict[str, object]]]:
    rows = await broker.state.console.auditor.entries(limit=1000)
    return [(e.access_key, e.action, e.subject, e.result.value, e.detail) for e in rows][::-1]


async def _dead_letter(admin: httpx.AsyncClient) -> str:
    group = {"name": "smith-bank", "consume_from": "FIRST_OFFSET", "max_reconsume_times": 0}
    assert (await admin.post("/v1/consumer-groups", json=group)).is_success
    subscribe = {"topic": "transfers"}
    assert await admin.post("/v1/consumer-groups/smith-bank/subscriptions", json=subscribe)
    assert (await admin.post("/v1/topics/transfers/messages", json={"body": "x"})).is_success
    receive = {"client_id": "s-1", "topic": "transfers", "wait_seconds": 2}
    got = (await admin.post("/v1/consumer-groups/smith-bank/receive", json=receive)).json()
    nack = {"receipt_handle": got["messages"][0]["receipt_handle"]}
    assert (await admin.post("/v1/consumer-groups/smith-bank/nack", json=nack)).json()[
        "outcome"
    ] == "DLQ"
    return str(got["messages"][0]["msg_id"])


async def test_every_rest_admin_action_is_a_row_with_account_and_address(
    acl_app: BrokerApp,
) -> None:
    async with signed(acl_app, OPERATOR) as admin, signed(acl_app, BOB) as bob:
        assert (await admin.post("/v1/topics", json={"name": "transfers", "queues": 1})).is_success
        assert (await admin.post("/v1/topics", json={"name": "scratch", "queues": 1})).is_success
        assert (await admin.delete("/v1/topics/scratch")).is_success
        half = {"topic": "transfers", "producer_group": "bob-bank", "body": "debit 1"}
        # a producer's own half and commit: no admin action, no row
        mine = (await bob.post("/v1/transactions", json=half)).json()["transaction_id"]
        ended = {"producer_group": "bob-bank"}
        assert (await bob.post(f"/v1/transactions/{mine}/commit", json=ended)).is_success
        # the operator's commit and rollback (no producer group): rows
        one = (await bob.post("/v1/transactions", json=half)).json()["transaction_id"]
        two = (await bob.post("/v1/transactions", json=half)).json()["transaction_id"]
        assert (await admin.post(f"/v1/transactions/{one}/commit", json={})).is_success
        assert (await admin.post(f"/v1/transactions/{two}/rollback", json={})).is_success
        # an operator's commit of an unknown transaction: tried, failed, with the code
        missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        assert (await admin.post(f"/v1/transactions/{missing}/commit", json={})).status_code == 404
        dead = await _dead_letter(admin)
        resend = await admin.post(f"/v1/consumer-groups/smith-bank/dlq/{dead}/resend")
        assert resend.is_success, resend.text
        reset = {"topic": "transfers", "timestamp": 0}
        answer = await admin.post("/v1/consumer-groups/smith-bank/reset-offset", json=reset)
        assert answer.is_success, answer.text
        account = {"secret_key": "a-new-secret-42", "topic_perms": ["transfers=PUB"]}
        assert (await admin.put("/v1/acl/accounts/new-key", json=account)).is_success
        assert (await admin.delete("/v1/acl/accounts/new-key")).is_success
        # refused: Bob may not delete a topic (403, a verified signature: a row) ...
        assert (await bob.delete("/v1/topics/transfers")).status_code == 403
        # ... and an unsigned request names nobody: no row
        assert (await acl_app.client.delete("/v1/topics/transfers")).status_code == 401
    rows = await _entries(acl_app)
    seen = [(key, action, subject, result) for key, action, subject, result, _ in rows]
    assert seen == [
        ("operator-key", "create_topic", "topic:transfers", "ok"),
        ("operator-key", "create_topic", "topic:scratch", "ok"),
        ("operator-key", "delete_topic", "topic:scratch", "ok"),
        ("operator-key", "commit", f"transaction:{one}", "ok"),
        ("operator-key", "rollback", f"transaction:{two}", "ok"),
        ("operator-key", "commit", f"transaction:{missing}", "failed"),
        ("operator-key", "resend_dead_letter", "consumer-group:smith-bank", "ok"),
        ("operator-key", "reset_offset", "consumer-group:smith-bank", "ok"),
        ("operator-key", "acl_put_account", "acl:new-key", "ok"),
        ("operator-key", "acl_delete_account", "acl:new-key", "ok"),
        ("bob-bank-key", "delete_topic", "topic:transfers", "refused"),
    ]
    for _key, _action, _subject, _result, detail in rows:
        assert detail["via"] == "rest"
        assert detail["address"] == "127.0.0.1"
    assert rows[5][4]["code"] == "TRANSACTION_NOT_FOUND"
    assert rows[-1][4]["code"] == "PERMISSION_DENIED"
    assert all("a-new-secret-42" not in str(row) for row in rows)  # a secret is never kept


def test_the_cli_s_admin_actions_are_audited_with_its_account(
    tmp_path: Path, acl_file: Path
) -> None:
    broker = BrokerProcess(
        f"sqlite:///{tmp_path / 'broker.db'}", free_port(), tmp_path / "broker.log",
        "--acl", str(acl_file),
    )  # fmt: skip
    broker.start()
    try:
        env = {
            **os.environ,
            "HALFMQ_ACCESS_KEY": OPERATOR.access_key,
            "HALFMQ_SECRET_KEY": OPERATOR.secret_key,
            "HALFMQ_BROKER": broker.url,
        }
        for args in (["topic", "create", "ledger"], ["topic", "delete", "ledger"]):
            done = subprocess.run(
                [sys.executable, "-m", "halfmq", *args], env=env, capture_output=True, timeout=60
            )
            assert done.returncode == 0, done.stderr.decode()
        smith = {
            **env,
            "HALFMQ_ACCESS_KEY": SMITH.access_key,
            "HALFMQ_SECRET_KEY": SMITH.secret_key,
        }
        refused = subprocess.run(
            [sys.executable, "-m", "halfmq", "topic", "create", "other"],
            env=smith, capture_output=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode != 0
        # the rows as the console shows them to the operator
        with httpx.Client(base_url=broker.url, timeout=10) as browser:
            page = browser.get("/console/login")
            token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert token is not None
            form = {"csrf_token": token.group(1), "access_key": OPERATOR.access_key,
                    "secret_key": OPERATOR.secret_key}  # fmt: skip
            assert browser.post("/console/login", data=form).status_code == 303
            audit = browser.get("/console/audit").text
        for action in ("create_topic", "delete_topic"):
            assert action in audit
        assert "topic:ledger" in audit
        assert "smith-bank-key" in audit  # the refused create, with the account that tried
        assert "refused" in audit
    finally:
        broker.stop()
