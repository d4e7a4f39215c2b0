"""Issue 29, item 2: a client on 127.0.0.1 cannot choose its own address.  Real broker processes
(``python -m halfmq broker serve``) over real HTTP from 127.0.0.1, the ACL on: without
``--forwarded-allow-ips`` no forwarded header (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``)
names the client -- not to the white lists, not to the callback rule, not to the console's sign-in
throttle; with a listed proxy, its ``X-Forwarded-For`` does (and only that header)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from framework.signing import Credentials, HalfmqAuth
from tests.support import BrokerProcess, check_endpoint, free_port, wait_until

ACL = """\
accounts:
  - accessKey: faraway-key
    secretKey: faraway-secret
    whiteRemoteAddress: 10.9.9.9
    topicPerms:
      - transfers=PUB
  - accessKey: bob-bank-key
    secretKey: bob-bank-secret
    admin: true
"""
FARAWAY = Credentials("faraway-key", "faraway-secret")  # PUB on transfers, from 10.9.9.9 only
BOB = Credentials("bob-bank-key", "bob-bank-secret")  # admin, from anywhere

FAST = (
    "--transaction-timeout-seconds", "0.5",
    "--transaction-check-interval-seconds", "0.3",
    "--check-timeout-seconds", "3",
)  # fmt: skip

# Each names the white-listed address; none is believed from a peer nobody listed.
FORGED = {
    "x-forwarded-for": {"X-Forwarded-For": "10.9.9.9"},
    "forwarded": {"Forwarded": "for=10.9.9.9"},
    "x-real-ip": {"X-Real-IP": "10.9.9.9"},
}


def _start(folder: Path, *extra: str) -> BrokerProcess:
    folder.mkdir(parents=True, exist_ok=True)
    acl = folder / "acl.yml"
    acl.write_text(ACL)
    url = f"sqlite:///{folder / 'broker.db'}"
    broker = BrokerProcess(url, free_port(), folder / "broker.log", "--acl", str(acl), *extra)
    broker.start()
    with httpx.Client(base_url=broker.url, auth=HalfmqAuth(BOB), timeout=10) as admin:
        created = admin.post("/v1/topics", json={"name": "transfers", "queues": 1})
        assert created.status_code in (200, 201), created.text
    return broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker as the README starts it: no trusted proxy."""
    process = _start(tmp_path_factory.mktemp("plain"), *FAST)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker told that 127.0.0.1 is its reverse proxy."""
    process = _start(tmp_path_factory.mktemp("proxied"), "--forwarded-allow-ips", "127.0.0.1")
    try:
        yield process
    finally:
        process.stop()


def _send(broker: BrokerProcess, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=broker.url, auth=HalfmqAuth(FARAWAY), timeout=10) as client:
        return client.post("/v1/topics/transfers/messages", json={"body": "x"}, headers=headers)


def _error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.parametrize("header", FORGED.values(), ids=FORGED.keys())
def test_a_header_does_not_let_an_account_in_from_outside_its_white_list(
    broker: BrokerProcess, header: dict[str, str]
) -> None:
    sent = _send(broker, header)
    assert sent.status_code == 403, sent.text
    assert _error(sent)["code"] == "ADDRESS_NOT_ALLOWED"
    assert _error(sent)["detail"]["remote_address"] == "127.0.0.1"  # the peer's, not the header's


def test_a_listed_proxy_names_the_client_in_x_forwarded_for_and_in_no_other_header(
    proxied: BrokerProcess,
) -> None:
    direct = _send(proxied, {})
    assert (direct.status_code, _error(direct)["code"]) == (403, "ADDRESS_NOT_ALLOWED")
    for name in ("forwarded", "x-real-ip"):  # never read, whoever sends them (docs/acl.md)
        refused = _send(proxied, FORGED[name])
        assert (refused.status_code, _error(refused)["code"]) == (403, "ADDRESS_NOT_ALLOWED")
    let_in = _send(proxied, FORGED["x-forwarded-for"])
    assert let_in.status_code == 201, let_in.text  # stored: the proxy said who the client is


def test_a_heartbeat_cannot_borrow_another_address_for_its_callback(broker: BrokerProcess) -> None:
    with (
        check_endpoint("127.0.0.3") as (borrowed_port, borrowed_seen),
        check_endpoint("127.0.0.1") as (own_port, own_seen),
        httpx.Client(base_url=broker.url, auth=HalfmqAuth(BOB), timeout=10) as bob,
    ):
        forged = bob.post(
            "/v1/producer-groups/forged-group/heartbeat",
            json={"client_id": "f-1", "callback_url": f"http://127.0.0.3:{borrowed_port}/check"},
            headers={"X-Forwarded-For": "127.0.0.3"},
        )
        assert forged.status_code == 403, forged.text
        assert _error(forged)["code"] == "CALLBACK_NOT_ALLOWED"
        own = bob.post(
            "/v1/producer-groups/own-group/heartbeat",
            json={"client_id": "o-1", "callback_url": f"http://127.0.0.1:{own_port}/check"},
        )
        assert own.status_code == 200, own.text
        halves = {}
        for group in ("forged-group", "own-group"):
            half = bob.post(
                "/v1/transactions",
                json={"topic": "transfers", "producer_group": group, "body": f"debit {group}"},
            )
            assert half.status_code == 201, half.text
            halves[group] = half.json()["transaction_id"]

        def checked() -> bool:
            txid = halves["own-group"]
            return bool(bob.get(f"/v1/transactions/{txid}").json()["state"] == "COMMITTED")

        # The check rounds ran: the half of the group whose callback was accepted was checked...
        wait_until(checked, 30, "the check of the accepted callback")
        time.sleep(1)  # (a few more rounds)
        forged_state = bob.get(f"/v1/transactions/{halves['forged-group']}").json()["state"]
    assert own_seen, "the accepted callback was POSTed to"
    # ... and nothing was POSTed to the address the header named.
    assert borrowed_seen == []
    assert forged_state == "PREPARED"


def test_sign_ins_with_a_rotating_forwarded_header_are_throttled_by_the_peer(
    broker: BrokerProcess,
) -> None:
    with httpx.Client(base_url=broker.url, timeout=10) as browser:
        page = browser.get("/console/login")
        token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        statuses = []
        for n in range(30):  # a new access key each time: only the per-address limit applies
            answer = browser.post(
                "/console/login",
                data={"csrf_token": token, "access_key": f"nobody-{n}", "secret_key": "guess"},
                headers={"X-Forwarded-For": f"198.51.100.{n + 1}"},
            )
            statuses.append(answer.status_code)
    assert statuses[:5] == [401] * 5
    assert set(statuses[5:]) == {429}  # 127.0.0.1 is throttled, whatever the header says
    assert "too many failed sign-ins from 127.0.0.1" in answer.text
