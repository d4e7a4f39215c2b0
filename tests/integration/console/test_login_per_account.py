"""Issue 29, item 6: the console's sign-in throttle counts failures per access key too, from any
addresses.  Over real HTTP against a broker process, from rotating loopback addresses (each client
binds its own 127.0.0.x); the decay in process with a short window, and the counting itself on a
clock the test moves."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from broker_service.console.sessions import LoginThrottle
from broker_service.store import migrate
from tests.integration.console.conftest import csrf_of
from tests.support import BrokerApp, BrokerProcess, free_port

ACL = """\
accounts:
  - accessKey: operator-key
    secretKey: operator-secret-0123456789
    admin: true
  - accessKey: teller-key
    secretKey: teller-secret-0123456789
    groupPerms:
      - bob-bank=PUB
"""
OPERATOR = ("operator-key", "operator-secret-0123456789")
TELLER = ("teller-key", "teller-secret-0123456789")


def _sign_in(url: str, local_address: str, access_key: str, secret_key: str) -> httpx.Response:
    """A browser on ``local_address`` signing in (its own cookie and CSRF token)."""
    transport = httpx.HTTPTransport(local_address=local_address)
    with httpx.Client(base_url=url, transport=transport, timeout=10) as browser:
        token = csrf_of(browser.get("/console/login").text)
        form = {"csrf_token": token, "access_key": access_key, "secret_key": secret_key}
        return browser.post("/console/login", data=form)


def test_wrong_secrets_for_one_account_from_many_addresses_are_throttled(tmp_path: Path) -> None:
    acl = tmp_path / "acl.yml"
    acl.write_text(ACL)
    log = tmp_path / "broker.log"
    broker = BrokerProcess(f"sqlite:///{tmp_path / 'b.db'}", free_port(), log, "--acl", str(acl))
    broker.start()
    try:
        for n in range(10):  # two from each of five addresses: none reaches its own limit (5)
            wrong = _sign_in(broker.url, f"127.0.0.{10 + n // 2}", OPERATOR[0], "guess")
            assert wrong.status_code == 401, (n, wrong.text)
        fresh = "127.0.0.30"  # an address with no failure at all
        locked = _sign_in(broker.url, fresh, *OPERATOR)
        assert locked.status_code == 429  # the right secret included, until the window passes
        assert "too many failed sign-ins for this access key: try again in" in locked.text
        assert OPERATOR[0] not in locked.text.split("<form", 1)[0]  # the key is not echoed
        # The limit is the account's: the same fresh address signs another account in.
        assert _sign_in(broker.url, fresh, *TELLER).status_code == 303
    finally:
        broker.stop()
    text = log.read_text()
    assert text.count("10 failures for access key 'operator-key' in 300 s") == 1
    assert OPERATOR[1] not in text


async def test_the_account_limit_decays_and_then_the_right_secret_signs_in(
    sqlite_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(sqlite_url)
    acl = tmp_path / "acl.yml"
    acl.write_text(ACL)
    async with BrokerApp.start(database_url=sqlite_url, acl_file=acl) as broker:
        window = 5.0
        broker.state.console.throttle = LoginThrottle(window_seconds=window, delay=0)

        async def sign_in(address: str, secret: str) -> httpx.Response:
            transport = httpx.ASGITransport(app=broker.app, client=(address, 50000))  # type: ignore[arg-type]
            async with httpx.AsyncClient(transport=transport, base_url="http://broker") as c:
                token = csrf_of((await c.get("/console/login")).text)
                form = {"csrf_token": token, "access_key": OPERATOR[0], "secret_key": secret}
                return await c.post("/console/login", data=form)

        started = time.monotonic()
        for n in range(10):
            assert (await sign_in(f"127.0.0.{10 + n // 2}", "guess")).status_code == 401
        assert (await sign_in("127.0.0.30", OPERATOR[1])).status_code == 429
        deadline = started + window + 30
        while (answer := await sign_in("127.0.0.30", OPERATOR[1])).status_code == 429:
            assert time.monotonic() < deadline, "the account stayed locked past its window"
            await asyncio.sleep(0.25)
        assert answer.status_code == 303  # signed in: refused attempts did not extend the lock
        assert time.monotonic() - started >= window * 0.9


def test_the_throttle_counts_each_address_and_each_access_key_in_its_window() -> None:
    now = [1000.0]
    throttle = LoginThrottle(limit=5, window_seconds=300, account_limit=10, clock=lambda: now[0])
    reached = [throttle.failed(f"10.0.0.{n}", "operator-key") for n in range(10)]
    assert reached[-1] == (False, True)  # the tenth reaches the access key's limit
    assert not any(account for _, account in reached[:-1])
    assert throttle.wait_for_account("operator-key") == 300
    assert throttle.wait_for("10.0.0.1") == 0  # each address failed once
    assert throttle.wait_for_account("teller-key") == 0
    now[0] += 100
    assert throttle.wait_for_account("operator-key") == 200
    now[0] += 200  # the oldest failure leaves the window
    assert throttle.wait_for_account("operator-key") == 0
    # Any access key typed is counted, an account's or not (a 429 tells nobody which exist).
    for n in range(10):
        throttle.failed(f"10.0.1.{n}", "no-such-key")
    assert throttle.wait_for_account("no-such-key") == 300
    # A success clears its address's and its key's failures.
    throttle.failed("10.0.2.1", "teller-key")
    throttle.succeeded("10.0.2.1", "teller-key")
    assert throttle.wait_for("10.0.2.1") == 0
    assert throttle.wait_for_account("teller-key") == 0
