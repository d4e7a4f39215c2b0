"""The console's pages over HTTP in process, on both stores: every page renders, an action goes
through its CSRF-checked form into the audit log; the session cookie, the login's throttle, and
the gate's rule that on /console only a session counts."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from broker_service.console import views
from broker_service.console.reports import read_reports, report_html
from broker_service.console.sessions import COOKIE, Session, SessionSigner, session_key
from framework.signing import HalfmqAuth
from tests.integration.console.conftest import ACL, OPERATOR, _reports, csrf_of
from tests.support import BrokerApp


async def _half(broker: BrokerApp, n: int = 0) -> dict[str, str]:
    body = {"topic": "transfers", "producer_group": "bob-bank", "body": f"debit {n}"}
    response = await broker.client.post("/v1/transactions", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_every_page_renders_and_an_action_is_audited(
    migrated_url: str, tmp_path: Path
) -> None:
    _reports(tmp_path / "reports")
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, console_reports_dir=tmp_path / "reports"
    ) as broker:
        await broker.topic("transfers", 2)
        half = await _half(broker)
        client = broker.client
        txid, msg_id = half["transaction_id"], half["msg_id"]
        pages = {
            "/console": "Pending halves by age",
            "/console/topics": "transfers",
            "/console/transactions": txid,
            f"/console/transactions/{txid}": "PREPARED",
            "/console/producer-groups": "bob-bank",
            "/console/producer-groups/bob-bank": "No instance",
            "/console/consumer-groups": "Consumer groups",
            "/console/messages": "Search",
            f"/console/messages/{msg_id}": "HALF_STORED",
            "/console/reconciliation": "2026-11-24",
            "/console/reconciliation/date=2026-11-23": "Reconciliation report 2026-11-23",
            "/console/reconciliation/date=2026-11-23?raw=1": "Report 2026-11-23",
            "/console/audit": "Audit log",
        }
        for path, marker in pages.items():
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            assert marker in response.text, path
        open_page = (await client.get("/console")).text
        assert 'id="acl-off"' in open_page  # the ACL is off: the page says the console is open
        # Bad input is a page saying so, never a 500.
        assert (await client.get("/console/transactions/nope")).status_code == 404
        assert (await client.get("/console/transactions?limit=0")).status_code == 422
        assert (await client.get("/console/reconciliation/%2E%2E")).status_code == 404
        assert (await client.get("/console/consumer-groups/missing")).status_code == 404
        # Commit through the form: its CSRF token, then the audit log on the page.
        page = (await client.get(f"/console/transactions/{txid}")).text
        done = await client.post(
            f"/console/transactions/{txid}/commit", data={"csrf_token": csrf_of(page)}
        )
        assert done.status_code == 303
        after = (await client.get(f"/console/transactions/{txid}")).text
        assert 'id="state">COMMITTED' in after
        audit_row = re.search(r'<table class="audit">.*?</table>', after, re.S)
        assert audit_row is not None
        assert "anonymous" in audit_row.group(0)
        assert ">commit<" in audit_row.group(0)
        metrics = (await client.get("/metrics")).text
        assert 'halfmq_audit_actions_total{action="commit",result="ok"} 1.0' in metrics


async def test_a_discarded_half_offers_resume_checks(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, transaction_timeout_seconds=0
    ) as broker:
        await broker.topic("transfers", 2)
        txid = (await _half(broker))["transaction_id"]
        assert (await broker.client.delete("/v1/topics/transfers")).status_code in (200, 204)
        await broker.state.transactions.claim_round(10)  # its topic is gone: DISCARDED
        page = (await broker.client.get(f"/console/transactions/{txid}")).text
        assert 'id="state">DISCARDED' in page
        assert ">Resume checks<" in page
        resumed = await broker.client.post(
            f"/console/transactions/{txid}/check", data={"csrf_token": csrf_of(page)}
        )
        assert resumed.status_code == 303
        after = (await broker.client.get(f"/console/transactions/{txid}")).text
        assert ">resume_checks<" in after  # checked in the next round (its state stays until then)
        assert "next_check_at=20" in after
        assert ">ok<" in after


async def test_the_console_setting_turns_it_off(sqlite_url: str) -> None:
    async with BrokerApp.start(database_url=sqlite_url, console=False) as broker:
        assert (await broker.client.get("/console")).status_code == 404


def test_a_session_cookie_cannot_be_forged_extended_or_reused_for_csrf() -> None:
    signer = SessionSigner(session_key("secret"), 3600)
    session = signer.new("operator-key", "operator-secret")
    value = signer.dump(session)
    assert signer.load(value) == session
    payload, mac = value.split(".")
    assert signer.load(payload + "." + "0" * len(mac)) is None  # forged
    assert signer.load(value[:-1]) is None
    other = SessionSigner(session_key("another secret"), 3600)
    assert other.load(value) is None  # another broker's key
    expired = Session("operator-key", "s", int(time.time() * 1000) - 1, session.binding)
    assert signer.load(signer.dump(expired)) is None
    token = signer.csrf_token(session)
    assert signer.csrf_ok(session, token)
    assert not signer.csrf_ok(signer.new("operator-key", "operator-secret"), token)
    assert not signer.csrf_ok(session, "")
    assert "operator-secret" not in value
    assert session_key(None) != session_key(None)  # unset: a random key per process


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return path


async def _login(client: httpx.AsyncClient, key: str, secret: str) -> httpx.Response:
    page = await client.get("/console/login")
    form = {"csrf_token": csrf_of(page.text), "access_key": key, "secret_key": secret}
    return await client.post("/console/login", data=form)


async def test_login_sets_a_strict_http_only_cookie_and_never_shows_a_secret(
    migrated_url: str, acl_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as broker:
        client = broker.client
        assert (await client.get("/console")).status_code == 303  # not signed in
        wrong = await _login(client, OPERATOR.access_key, "not-the-secret")
        assert wrong.status_code == 401
        assert "not-the-secret" not in wrong.text
        signed = await _login(client, OPERATOR.access_key, OPERATOR.secret_key)
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Path=/console" in cookie
        assert "Max-Age=" in cookie
        assert "Secure" not in cookie  # plain HTTP here; Secure over TLS
        overview = await client.get("/console")
        assert overview.status_code == 200
        assert "operator-key" in overview.text
        for response in (wrong, signed, overview):
            assert OPERATOR.secret_key not in response.text
            assert OPERATOR.secret_key not in str(response.headers)
        assert OPERATOR.secret_key not in caplog.text
        assert "not-the-secret" not in caplog.text


async def test_failed_logins_from_one_address_are_slowed_then_refused(
    migrated_url: str, acl_file: Path
) -> None:
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as broker:
        started = time.monotonic()
        for _ in range(5):
            assert (await _login(broker.client, "operator-key", "guess")).status_code == 401
        assert time.monotonic() - started >= 5 * 0.25  # each failure waits
        refused = await _login(broker.client, OPERATOR.access_key, OPERATOR.secret_key)
        assert refused.status_code == 429  # even the right secret, until the window passes
        assert "try again in" in refused.text


async def test_on_console_paths_only_a_session_counts_not_a_signature(
    migrated_url: str, acl_file: Path
) -> None:
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as broker:
        transport = httpx.ASGITransport(app=broker.app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(
            transport=transport, base_url="http://broker", auth=HalfmqAuth(OPERATOR)
        ) as signed:
            assert (await signed.get("/v1/topics")).status_code == 200  # the API: signed is fine
            response = await signed.get("/console/topics")
            assert response.status_code == 303  # the console: sign in first
            assert response.content == b""
            posted = await signed.post("/console/topics", data={"name": "x"})
            assert posted.status_code == 401
            assert posted.json()["error"]["code"] == "SESSION_MISSING"
        # And a session does not open the API.
        await _login(broker.client, OPERATOR.access_key, OPERATOR.secret_key)
        api = await broker.client.get("/v1/topics")
        assert api.status_code == 401
        assert api.json()["error"]["code"] == "SIGNATURE_MISSING"


def test_reports_are_read_newest_first_and_only_by_plain_names(tmp_path: Path) -> None:
    _reports(tmp_path)
    (tmp_path / "date=2026-11-25").mkdir()  # a run that wrote nothing: not listed
    (tmp_path / "date=2026-11-22").mkdir()
    (tmp_path / "date=2026-11-22" / "summary.json").write_text("not json")
    reports = read_reports(tmp_path)
    assert [r.date for r in reports] == ["2026-11-24", "2026-11-23", "2026-11-22"]
    assert (reports[0].critical, reports[0].warning) == (1, 3)
    assert reports[0].counts == {"double_credit": 1, "stuck_half": 3}
    assert (reports[2].status, reports[2].critical) == ("unknown", None)
    assert report_html(tmp_path, "date=2026-11-24") is not None
    for bad in ("..", "../x", "date=2026-11-24/../../etc", ""):
        assert report_html(tmp_path, bad) is None
    assert read_reports(tmp_path / "missing") == []


async def _dead_letter(broker: BrokerApp) -> str:
    """smith-bank gives up on a message at once (max_reconsume_times 0): a dead letter."""
    client = broker.client
    group = {"name": "smith-bank", "consume_from": "FIRST_OFFSET", "max_reconsume_times": 0}
    assert (await client.post("/v1/consumer-groups", json=group)).is_success
    subscription = {"topic": "transfers"}
    assert (
        await client.post("/v1/consumer-groups/smith-bank/subscriptions", json=subscription)
    ).is_success
    sent = await client.post("/v1/topics/transfers/messages", json={"body": "credit 7"})
    assert sent.is_success, sent.text
    got = await client.post(
        "/v1/consumer-groups/smith-bank/receive",
        json={"client_id": "smith-1", "topic": "transfers", "wait_seconds": 0},
    )
    (message,) = got.json()["messages"]
    nack = await client.post(
        "/v1/consumer-groups/smith-bank/nack", json={"receipt_handle": message["receipt_handle"]}
    )
    assert nack.json()["outcome"] == "DLQ", nack.text
    return str(message["msg_id"])


def _audit_rows(html: str) -> list[str]:
    table = re.search(r'<table class="audit">.*?</table>', html, re.S)
    assert table is not None, "no audit log on the page"
    return re.findall(r"<tr>\s*<td.*?</tr>", table.group(0), re.S)


async def test_a_consumer_group_page_its_dead_letters_and_a_resend(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        client = broker.client
        await broker.topic("transfers", 2)
        dead = await _dead_letter(broker)
        await client.post("/v1/topics/transfers/messages", json={"body": "credit 8"})
        page = await client.get("/console/consumer-groups/smith-bank")
        assert page.status_code == 200
        assert "FIRST_OFFSET" in page.text
        assert "<li>transfers <code>*</code></li>" in page.text  # its subscription
        assert 'id="total-lag">1<' in page.text  # credit 8, not yet received
        assert 'id="dead">1<' in page.text
        assert "smith-1" in page.text  # the member that received
        assert 'id="members-live">1<' in page.text
        assert "%RETRY%smith-bank" in page.text
        # A member that has not received for longer than consumer_expiry_seconds is listed,
        # and not counted live.
        engine = sa.create_engine(migrated_url)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO consumers (consumer_group, client_id, last_seen_at) "
                    "VALUES ('smith-bank', 'smith-old', :at)"
                ),
                {"at": int(time.time() * 1000) - 3_600_000},
            )
        engine.dispose()
        aged = (await client.get("/console/consumer-groups/smith-bank")).text
        assert 'id="members-live">1<' in aged
        assert re.search(r"smith-old</td><td>REST</td><td>[^<]*</td><td>gone</td>", aged)
        assert re.search(r"smith-1</td><td>REST</td><td>[^<]*</td><td>live</td>", aged)
        dlq = await client.get("/console/consumer-groups/smith-bank/dlq")
        assert dlq.status_code == 200
        assert f'value="{dead}"' in dlq.text
        assert "<td>transfers</td>" in dlq.text  # its original topic
        assert '<td class="resent">-</td>' in dlq.text
        # Resend it through the form: the DLQ page says when, the audit log says who.
        done = await client.post(
            "/console/consumer-groups/smith-bank/dlq/resend",
            data={"csrf_token": csrf_of(dlq.text), "msg_id": dead},
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/console/consumer-groups/smith-bank/dlq"
        after = (await client.get("/console/consumer-groups/smith-bank/dlq")).text
        assert '<td class="resent">-</td>' not in after
        (row,) = _audit_rows(after)
        assert "resend_dead_letter" in row
        assert ">ok<" in row
        assert dead in row
        api = (await client.get("/v1/consumer-groups/smith-bank/dlq")).json()["messages"]
        assert api[0]["resent_at"] is not None
        again = await client.post(
            "/v1/consumer-groups/smith-bank/receive",
            json={"client_id": "smith-1", "wait_seconds": 0, "max_messages": 10},
        )
        assert dead in {m["msg_id"] for m in again.json()["messages"]}  # delivered again


async def test_a_rollback_through_the_console(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        txid = (await _half(broker))["transaction_id"]
        page = (await broker.client.get(f"/console/transactions/{txid}")).text
        assert 'id="action-rollback"' in page
        done = await broker.client.post(
            f"/console/transactions/{txid}/rollback", data={"csrf_token": csrf_of(page)}
        )
        assert done.status_code == 303
        after = (await broker.client.get(f"/console/transactions/{txid}")).text
        assert 'id="state">ROLLED_BACK' in after
        assert 'id="actions"' not in after  # nothing left to do
        (row,) = _audit_rows(after)
        assert ">rollback<" in row
        assert ">ok<" in row
        assert "state=ROLLED_BACK" in row
        api = (await broker.client.get(f"/v1/transactions/{txid}")).json()
        assert (api["state"], api["resolved_by"]) == ("ROLLED_BACK", "operator")
        metrics = (await broker.client.get("/metrics")).text
        assert 'halfmq_audit_actions_total{action="rollback",result="ok"} 1.0' in metrics


async def test_reset_offset_through_the_console(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        client = broker.client
        await broker.topic("transfers", 1)
        group = {"name": "audit-bank", "consume_from": "FIRST_OFFSET"}
        assert (await client.post("/v1/consumer-groups", json=group)).is_success
        subscription = {"topic": "transfers"}
        assert (
            await client.post("/v1/consumer-groups/audit-bank/subscriptions", json=subscription)
        ).is_success
        for n in range(3):
            await client.post("/v1/topics/transfers/messages", json={"body": f"m{n}"})
        got = await client.post(
            "/v1/consumer-groups/audit-bank/receive",
            json={"client_id": "a1", "max_messages": 10, "wait_seconds": 0},
        )
        handles = [m["receipt_handle"] for m in got.json()["messages"]]
        await client.post("/v1/consumer-groups/audit-bank/ack", json={"receipt_handles": handles})
        page = (await client.get("/console/consumer-groups/audit-bank")).text
        assert 'id="total-lag">0<' in page
        assert "<option>transfers</option>" in page
        # Back to before the first message: the group consumes all three again.
        done = await client.post(
            "/console/consumer-groups/audit-bank/reset-offset",
            data={"csrf_token": csrf_of(page), "topic": "transfers",
                  "timestamp": "2000-01-01T00:00:00"},
        )  # fmt: skip
        assert done.status_code == 303
        after = (await client.get("/console/consumer-groups/audit-bank")).text
        assert 'id="total-lag">3<' in after
        (row,) = _audit_rows(after)
        assert ">reset_offset<" in row
        assert ">ok<" in row
        assert "offsets={&#39;0&#39;: 0}" in row
        # A topic it does not subscribe to: tried, refused by the broker, audited as failed.
        failed = await client.post(
            "/console/consumer-groups/audit-bank/reset-offset",
            data={"csrf_token": csrf_of(after), "topic": "other", "timestamp": "2000-01-01T00:00"},
        )
        assert failed.status_code == 303
        rows = _audit_rows((await client.get("/console/consumer-groups/audit-bank")).text)
        assert ">failed<" in rows[0]
        assert "SUBSCRIPTION_NOT_FOUND" in rows[0]


async def test_create_and_delete_a_topic_through_the_console(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        client = broker.client
        page = (await client.get("/console/topics")).text
        created = await client.post(
            "/console/topics",
            data={"csrf_token": csrf_of(page), "name": "payouts", "queues": "3", "ordered": "on"},
        )
        assert created.status_code == 303
        api = (await client.get("/v1/topics/payouts")).json()
        assert (api["queues"], api["order"]) == (3, True)
        page = (await client.get("/console/topics")).text
        assert '<td class="mono">payouts</td>' in page
        assert 'action="/console/topics/payouts/delete"' in page
        (row,) = _audit_rows(page)
        assert ">create_topic<" in row
        assert ">ok<" in row
        deleted = await client.post(
            "/console/topics/payouts/delete", data={"csrf_token": csrf_of(page)}
        )
        assert deleted.status_code == 303
        assert (await client.get("/v1/topics/payouts")).status_code == 404
        page = (await client.get("/console/topics")).text
        assert '<td class="mono">payouts</td>' not in page
        rows = _audit_rows(page)
        assert ">delete_topic<" in rows[0]
        assert ">ok<" in rows[0]
        assert "topic=payouts" in rows[0]


def _row(html: str, marker: str) -> str:
    """The table row holding ``marker``."""
    rows: list[str] = [r for r in re.findall(r"<tr>.*?</tr>", html, re.S) if marker in r]
    assert len(rows) == 1, (marker, rows)
    return rows[0]


def _rate_cell(html: str, topic: str) -> str:
    found = re.search(r'<td class="num rate">(.*?)</td>', _row(html, f">{topic}</td>"), re.S)
    assert found is not None
    return found.group(1)


async def test_the_topics_page_shows_each_topic_rate_from_its_offsets(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        client = broker.client
        clock = [1000.0]
        broker.state.console.topic_rates.clock = lambda: clock[0]
        await broker.topic("transfers", 2)
        first = (await client.get("/console/topics")).text
        assert "Rate (msg/s, last minute)" in first
        assert "measuring…" in _rate_cell(first, "transfers")  # one sample: no rate yet
        for n in range(30):
            await client.post("/v1/topics/transfers/messages", json={"body": f"m{n}"})
        clock[0] += 10
        assert (await client.get("/console")).status_code == 200  # the overview samples too
        for n in range(30):
            await client.post("/v1/topics/transfers/messages", json={"body": f"m{n}"})
        clock[0] += 10
        await broker.topic("payouts", 1)
        page = (await client.get("/console/topics")).text
        assert _rate_cell(page, "transfers") == "3.0"  # 60 messages in the 20 s since the first
        assert "measuring…" in _rate_cell(page, "payouts")  # new: its first sample
        for n in range(30):
            await client.post("/v1/topics/transfers/messages", json={"body": f"m{n}"})
        clock[0] += 50  # the first sample leaves the minute: the overview's is the oldest now
        page = (await client.get("/console/topics")).text
        assert _rate_cell(page, "transfers") == "1.0"  # 90 - 30 messages in 60 s
        clock[0] += 61  # every sample left the minute: measuring again
        page = (await client.get("/console/topics")).text
        assert "measuring…" in _rate_cell(page, "transfers")
        assert (await client.delete("/v1/topics/payouts")).status_code in (200, 204)
        await client.get("/console/topics")
        assert set(broker.state.console.topic_rates._windows) >= {"transfers"}
        assert "payouts" not in broker.state.console.topic_rates._windows  # deleted: forgotten


def test_a_rate_window_is_bounded_and_restarts_when_a_total_goes_down() -> None:
    window = views.Window(seconds=60, min_span=1, max_samples=4)
    assert window.add(0, [0]) == [None]
    assert window.add(0.5, [5]) == [None]  # not a second apart yet
    for at in range(1, 31):
        (rate,) = window.add(at, [10 * at])
        assert rate == 10  # the oldest sample stays while newer ones make room
        assert len(window) <= 4
    assert window.add(31, [3]) == [None]  # a topic made again: its offsets start over
    assert window.add(33, [13]) == [5]


async def test_the_transactions_list_shows_the_last_check_and_why_the_next_round(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, transaction_timeout_seconds=0
    ) as broker:
        client = broker.client
        await broker.topic("transfers", 2)
        lonely = (await _half(broker))["transaction_id"]  # bob-bank: no instance ever
        young_body = {"topic": "transfers", "producer_group": "bob-bank", "body": "young",
                      "check_immunity_seconds": 3600}  # fmt: skip
        young = (await client.post("/v1/transactions", json=young_body)).json()["transaction_id"]
        pulled_body = {"topic": "transfers", "producer_group": "smith-bank", "body": "pulled"}
        pulled = (await client.post("/v1/transactions", json=pulled_body)).json()
        beat = await client.post(
            "/v1/producer-groups/smith-bank/heartbeat", json={"client_id": "smith-1"}
        )
        assert beat.status_code == 200, beat.text
        await broker.state.transactions.claim_round(10)  # smith-1 is handed a check to pull
        checks = await client.get(
            "/v1/producer-groups/smith-bank/checks",
            params={"client_id": "smith-1", "wait_seconds": 0},
        )
        assert [c["transaction_id"] for c in checks.json()["checks"]] == [pulled["transaction_id"]]
        page = (await client.get("/console/transactions")).text
        assert "Last checked" in page
        assert "Next round" in page

        row = _row(page, lonely)
        assert '<td class="next-round" title="no live instance of producer group' in row
        assert ">NO_LIVE_INSTANCE</td>" in row
        assert '<td class="last-checked" title="-">-</td>' in row  # never reached an instance
        assert ">IMMUNE</td>" in _row(page, young)
        row = _row(page, pulled["transaction_id"])
        api = (await client.get(f"/v1/transactions/{pulled['transaction_id']}")).json()
        assert api["last_checked_at"] is not None
        assert f'<td class="last-checked" title="{api["last_checked_at"]}">' in row
        assert " ago</td>" in row
        # The claim of a pulled check is not read for the list: WAITING until next_check_at,
        # when the claim ends; its page reads the claim and says which broker holds it.
        assert ">WAITING</td>" in row
        own = (await client.get(f"/console/transactions/{pulled['transaction_id']}")).text
        assert "<strong>CLAIMED</strong>" in own

        # The list's reason is the page's, and filtered by group too.
        mine = (await client.get("/console/transactions?producer_group=bob-bank")).text
        assert ">NO_LIVE_INSTANCE</td>" in _row(mine, lonely)
        assert pulled["transaction_id"] not in mine
        lonely_page = (await client.get(f"/console/transactions/{lonely}")).text
        assert "<strong>NO_LIVE_INSTANCE</strong>" in lonely_page
