"""What a new user found wrong in the console (issue 29, items 9, 12 and 14), page by page over
HTTP in process, on both stores: a transaction's page shows its message's keys, tags and body
(escaped, a long one shortened with all of it a click away) and the list a keys column; a half
that is due says so; a consumer group's Retrying card counts what its rows count; the favicon
is a static file every page links; the reconciliation trend of a clean day keeps its axis and
says "no anomalies"; a report is framed with its scripts sandboxed away from the console."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import httpx
import pytest

from broker_service.console import views
from broker_service.console.routes.overview import AGES_MS
from tests.integration.console.conftest import _reports, csrf_of
from tests.support import BOB, OPERATOR, TELLER, BrokerApp, signed


async def _half(broker: BrokerApp, body: str, keys: list[str], tags: str | None = None) -> str:
    sent = {"topic": "transfers", "producer_group": "bob-bank", "body": body, "keys": keys}
    if tags is not None:
        sent["tags"] = tags
    response = await broker.client.post("/v1/transactions", json=sent)
    assert response.status_code == 201, response.text
    return str(response.json()["transaction_id"])


def _dd(page: str, dd_id: str) -> str:
    found = re.search(rf'<dd[^>]*id="{dd_id}"[^>]*>(.*?)</dd>', page, re.S)
    assert found is not None, f"no {dd_id} on the page"
    return found.group(1)


async def test_a_transaction_shows_its_messages_keys_tags_and_body(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        hostile = '<script>alert("x")</script> debit 10 from alice'
        short = await _half(broker, hostile, ["transfer-1", "alice"], "debit")
        long_body = "0123456789" * 100 + "THE-END"
        long = await _half(broker, long_body, ["transfer-2"])

        page = (await broker.client.get(f"/console/transactions/{short}")).text
        assert _dd(page, "message-keys") == "transfer-1, alice"
        assert _dd(page, "message-tags") == "debit"
        body = _dd(page, "message-body")
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; debit 10 from alice" in body
        assert "<script>" not in body  # escaped, never markup
        assert 'id="message-body-all"' not in body  # short: shown whole

        page = (await broker.client.get(f"/console/transactions/{long}")).text
        body = _dd(page, "message-body")
        preview = re.search(r'<pre class="body">(.*?)</pre>', body, re.S)
        assert preview is not None
        assert preview.group(1) == long_body[: views.BODY_PREVIEW] + " …"
        whole = re.search(
            r'<details id="message-body-all">.*?<pre class="body">(.*?)</pre>', body, re.S
        )
        assert whole is not None
        assert whole.group(1) == long_body
        assert "Show all 1,007 characters" in body

        listed = (await broker.client.get("/console/transactions")).text
        assert "<th>Keys</th>" in listed
        assert '<td class="mono keys">transfer-1, alice</td>' in listed
        assert '<td class="mono keys">transfer-2</td>' in listed


async def test_a_due_half_is_due_now_or_overdue_never_ago(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, transaction_timeout_seconds=0
    ) as broker:
        await broker.topic("transfers", 2)
        txid = await _half(broker, "debit 1", ["k1"])
        await asyncio.sleep(1.2)  # its next check was due at once; no round runs here
        page = (await broker.client.get(f"/console/transactions/{txid}")).text
        next_check = re.search(r"<dt>Next check</dt><dd>(.*?)</dd>", page, re.S)
        assert next_check is not None
        assert "ago" not in next_check.group(1)
        assert re.search(r"\((due now|overdue by \d+s)\)", next_check.group(1)), next_check
        listed = (await broker.client.get("/console/transactions")).text
        cell = re.search(r'<td class="next-check"[^>]*>(.*?)</td>', listed)
        assert cell is not None
        assert re.fullmatch(r"due now|overdue by \d+s", cell.group(1))


def test_the_due_filter_words() -> None:
    now = 1_700_000_000_000
    assert views.due(now + 4_000, now) == "in 4s"
    assert views.due(now, now) == "due now"
    assert views.due(now - 500, now) == "due now"
    assert views.due(now - 17_000, now) == "overdue by 17s"
    assert views.due(now - 200_000, now) == "overdue by 3m 20s"
    assert views.due(None, now) == "-"


async def test_a_groups_retrying_card_counts_what_its_rows_count(migrated_url: str) -> None:
    """Three queues each with a lease that ran out: each row says 1, REST's total and the
    console's card 3 (both said 0)."""
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        client = broker.client
        await broker.topic("transfers", 3)
        group = {"name": "smith-bank", "consume_from": "FIRST_OFFSET"}
        assert (await client.post("/v1/consumer-groups", json=group)).is_success
        subscription = {"topic": "transfers"}
        subscribed = await client.post(
            "/v1/consumer-groups/smith-bank/subscriptions", json=subscription
        )
        assert subscribed.is_success
        for n in range(3):  # one a queue
            sent = await client.post(
                "/v1/topics/transfers/messages", json={"body": f"credit {n}", "queue_id": n}
            )
            assert sent.is_success, sent.text
        receive = {"client_id": "smith-1", "max_messages": 10, "invisible_seconds": 0.2}
        got = await client.post("/v1/consumer-groups/smith-bank/receive", json=receive)
        assert len(got.json()["messages"]) == 3, got.text
        await asyncio.sleep(1.0)  # every lease has run out

        view = (await client.get("/v1/consumer-groups/smith-bank")).json()
        rows = {q["queue_id"]: q["retrying"] for q in view["queues"] if q["topic"] == "transfers"}
        assert rows == {0: 1, 1: 1, 2: 1}
        assert view["retrying"] == 3
        page = (await client.get("/console/consumer-groups/smith-bank")).text
        assert '<div class="value" id="retrying">3</div>' in page


async def test_the_favicon_is_a_static_file_every_page_links(
    migrated_url: str, acl_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as broker:
        icon = await broker.client.get("/console/static/favicon.svg")  # no session: public
        assert icon.status_code == 200
        assert icon.headers["content-type"].startswith("image/svg+xml")
        assert icon.content.startswith(b"<svg")
        login = await broker.client.get("/console/login")  # every page extends the same base
        assert '<link rel="icon" href="/console/static/favicon.svg"' in login.text
        # where a browser asks by itself: answered, not a 401 and a refusal in the log
        with caplog.at_level(logging.INFO):
            ico = await broker.client.get("/favicon.ico")
        assert ico.status_code == 200
        assert ico.content == icon.content
        refusals = [r for r in caplog.records if r.name.startswith("halfmq")]
        assert [r.getMessage() for r in refusals if "favicon" in r.getMessage()] == []


async def test_a_transactions_message_is_shown_only_to_who_may_read_its_topic(
    migrated_url: str, acl_file: Path
) -> None:
    """TELLER may read bob-bank's transactions (PUB on the group) but has no permission on their
    topic: the page shows the transaction, not its message's keys, tags and body."""
    async with BrokerApp.start(database_url=migrated_url, acl_file=acl_file) as broker:
        async with signed(broker, OPERATOR) as admin:
            await admin.post("/v1/topics", json={"name": "transfers", "queues": 1})
            half = {"topic": "transfers", "producer_group": "bob-bank",
                    "body": "debit 4711 from bob", "keys": ["transfer-4711"]}  # fmt: skip
            tid = (await admin.post("/v1/transactions", json=half)).json()["transaction_id"]
        for who, shown in ((TELLER, False), (BOB, True), (OPERATOR, True)):
            client = httpx.AsyncClient(transport=broker.client._transport, base_url="http://b")
            async with client:
                page = await client.get("/console/login")
                form = {"csrf_token": csrf_of(page.text), "access_key": who.access_key,
                        "secret_key": who.secret_key}  # fmt: skip
                assert (await client.post("/console/login", data=form)).status_code == 303
                answer = await client.get(f"/console/transactions/{tid}")
                assert answer.status_code == 200, (who.access_key, answer.text[:200])
                assert ("debit 4711 from bob" in answer.text) is shown, who.access_key
                assert ("transfer-4711" in answer.text) is shown, who.access_key
                assert ('id="message-withheld"' in answer.text) is not shown, who.access_key


def _clean_day(directory: Path) -> None:
    folder = directory / "date=2026-11-25"
    folder.mkdir(parents=True)
    summary = {"date": "2026-11-25", "status": "clean", "exit_code": 0, "critical": 0,
               "warning": 0, "counts": {"stuck_half": {"severity": "warning", "count": 0}}}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


async def test_a_clean_days_trend_has_its_axis_and_says_no_anomalies(
    migrated_url: str, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    _clean_day(reports)
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, console_reports_dir=reports
    ) as broker:
        page = (await broker.client.get("/console/reconciliation")).text
        chart = re.search(r'<svg class="trend-chart".*?</svg>', page, re.S)
        assert chart is not None, "a clean day has a trend too"
        assert chart.group(0).count('class="axis"') == 2  # its baseline and its y axis
        assert 'id="no-anomalies"' in chart.group(0)
        assert "no anomalies" in chart.group(0)
        assert 'class="clean-day"' in chart.group(0)
        _reports(tmp_path / "reports")  # two days with anomalies beside it
        page = (await broker.client.get("/console/reconciliation")).text
        assert 'id="no-anomalies"' not in page
        assert "2026-11-25: no anomalies" in page  # the clean day's mark still says so


async def test_a_report_is_framed_with_scripts_but_not_the_consoles_origin(
    migrated_url: str, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    _reports(reports)
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, console_reports_dir=reports
    ) as broker:
        page = await broker.client.get("/console/reconciliation/date=2026-11-24")
        assert page.status_code == 200
        frame = re.search(r"<iframe[^>]*>", page.text, re.S)
        assert frame is not None
        sandbox = re.search(r'sandbox="([^"]*)"', frame.group(0))
        assert sandbox is not None
        assert "allow-scripts" in sandbox.group(1).split()
        assert "allow-same-origin" not in sandbox.group(1)
        assert 'src="/console/reconciliation/date%3D2026-11-24?raw=1"' in frame.group(0)
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]

        raw = await broker.client.get("/console/reconciliation/date=2026-11-24?raw=1")
        assert "Report 2026-11-24" in raw.text
        csp = [d.strip() for d in raw.headers["content-security-policy"].split(";")]
        assert csp[0].startswith("sandbox ")
        assert "allow-scripts" in csp[0]
        assert "allow-same-origin" not in csp[0]  # an opaque origin: no cookie, no console call
        assert "default-src 'none'" in csp
        assert "script-src 'unsafe-inline'" in csp
        assert "frame-ancestors 'self'" in csp
        assert (await broker.client.get("/console/reconciliation/nope?raw=1")).status_code == 404


async def test_the_overviews_age_rows_are_the_ones_docs_console_md_names(
    migrated_url: str,
) -> None:
    """Each row counts the PREPARED halves at least that old, labelled as the docs say."""
    docs = (Path(__file__).parents[3] / "docs" / "console.md").read_text()
    overview = " ".join(docs[docs.index("**Overview**") :].split("**Topics**")[0].split())
    labels = ["any age"] + [
        f"{views.duration(ms // 1000)} or older" for ms in AGES_MS if ms
    ]  # from the code
    assert labels == ["any age", "1 min or older", "10 min or older", "1 h or older",
                      "1 day or older"]  # fmt: skip
    for label in labels:
        assert f"*{label}*" in overview, label
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        await _half(broker, "debit 1", ["k1"])
        page = (await broker.client.get("/console")).text
        rows = re.findall(r"<tr><td>([^<]+)</td>\s*<td class=\"num\"><a [^>]*>(\d+)</a>", page)
        assert rows == [("any age", "1"), ("1 min or older", "0"), ("10 min or older", "0"),
                        ("1 h or older", "0"), ("1 day or older", "0")]  # fmt: skip
