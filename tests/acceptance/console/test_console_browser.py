"""The console in Debian's chromium (Playwright, sync API) against a real broker process with
the ACL on: sign in, commit a PREPARED half by its button (its confirmation dismissed first does
nothing), check one now and see CHECKED on its timeline, resend a dead letter, resume the checks
of a DISCARDED half; every action's confirmation dialog is recorded and its question checked.  An
account without admin sees no buttons and is refused when it posts anyway; a post without its
CSRF token is refused.  Every page is photographed."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from framework.signing import HalfmqAuth
from tests.integration.console.conftest import OPERATOR, TELLER, Scene, csrf_of
from tests.support import wait_until

pytestmark = pytest.mark.slow


@dataclass
class Dialogs:
    """The dialogs a page opened, (type, message) each, and what the next one is answered."""

    seen: list[tuple[str, str]] = field(default_factory=list)
    accept: bool = True

    def answer(self, dialog: Any) -> None:
        self.seen.append((dialog.type, dialog.message))
        if self.accept:
            dialog.accept()
        else:
            dialog.dismiss()


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


@pytest.fixture
def page(browser: Any, dialogs: Dialogs) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.on("dialog", dialogs.answer)  # every action asks first: recorded, then answered
    try:
        yield opened
    finally:
        context.close()


def sign_in(page: Any, scene: Scene, key: str, secret: str, shot: str | None = None) -> None:
    page.goto(f"{scene.broker.url}/console")
    assert "/console/login" in page.url  # no session: the login page, nothing else shown
    page.fill("#access_key", key)
    page.fill("#secret_key", secret)
    if shot:
        page.screenshot(path=str(scene.shots / shot), full_page=True)
    page.click("button[type=submit]")
    page.wait_for_url(f"{scene.broker.url}/console")
    assert page.text_content("#who") == key


def _state(scene: Scene, transaction_id: str) -> str:
    """The transaction's state as the REST API tells it."""
    auth = HalfmqAuth(OPERATOR)
    with httpx.Client(base_url=scene.broker.url, auth=auth, timeout=10) as client:
        state: str = client.get(f"/v1/transactions/{transaction_id}").json()["state"]
        return state


def test_admin_commits_a_prepared_half_by_its_button(
    scene: Scene, page: Any, dialogs: Dialogs
) -> None:
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key, shot="login.png")
    page.screenshot(path=str(scene.shots / "overview.png"), full_page=True)
    assert page.text_content("#pending-total") == "3"
    page.click("text=Transactions")
    half = scene.halves[0]
    assert page.is_visible(f"text={half}")
    page.screenshot(path=str(scene.shots / "transactions.png"), full_page=True)
    page.click(f"text={half}")
    assert page.text_content("#state") == "PREPARED"
    page.screenshot(path=str(scene.shots / "transaction-prepared.png"), full_page=True)
    question = ("confirm", "Commit this transaction? Its message goes to consumers.")
    dialogs.accept = False  # "Cancel": nothing is posted
    page.click("#action-commit")
    assert dialogs.seen == [question]
    page.reload()
    assert page.text_content("#state") == "PREPARED"
    assert _state(scene, half) == "PREPARED"
    dialogs.accept = True
    page.click("#action-commit")
    page.wait_for_selector("#state:has-text('COMMITTED')")
    assert dialogs.seen == [question, question]
    assert _state(scene, half) == "COMMITTED"
    row = page.locator("table.audit tbody tr").first
    assert "operator-key" in row.inner_text()
    assert "commit" in row.inner_text()
    assert "ok" in row.inner_text()
    assert page.locator("#actions").count() == 0  # nothing left to do
    page.screenshot(path=str(scene.shots / "transaction-committed.png"), full_page=True)


def test_check_now_puts_checked_on_the_timeline(scene: Scene, page: Any, dialogs: Dialogs) -> None:
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    half = scene.halves[1]
    page.goto(f"{scene.broker.url}/console/transactions/{half}")
    page.click("#action-check-now")
    page.wait_for_url(f"{scene.broker.url}/console/transactions/{half}")
    assert dialogs.seen == [("confirm", "Ask a producer instance about this transaction now?")]
    assert "check_now" in page.locator("table.audit tbody tr").first.inner_text()

    def checked() -> bool:
        page.reload()
        return page.locator("#timeline li.CHECKED").count() > 0

    wait_until(checked, 15, "a CHECKED event on the timeline")
    text = page.locator("#timeline li.CHECKED").first.inner_text()
    assert "no_live_instance" in text  # no producer instance of bob-bank is alive
    assert page.locator("#checks tbody tr").count() >= 1
    page.screenshot(path=str(scene.shots / "transaction-checked.png"), full_page=True)
    page.click("dl.facts a >> nth=0")  # its message
    page.wait_for_selector("#timeline")
    assert page.locator("#timeline li.HALF_STORED").count() == 1
    page.screenshot(path=str(scene.shots / "message-trace.png"), full_page=True)


def test_resend_a_dead_letter(scene: Scene, page: Any, dialogs: Dialogs) -> None:
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    page.click("text=Consumer groups")
    assert page.is_visible("a[href='/console/consumer-groups/smith-bank']")
    page.screenshot(path=str(scene.shots / "consumer-groups.png"), full_page=True)
    listed = page.locator("#groups tbody tr", has_text="smith-bank").inner_text().split()
    page.click("a[href='/console/consumer-groups/smith-bank']")
    lag = page.text_content("#total-lag") or ""
    assert lag.isdigit()
    assert int(lag) >= 4  # the four sent after its dead letter, at least
    assert listed[1] == lag  # the list says the same
    assert page.text_content("#dead") == "1"
    page.screenshot(path=str(scene.shots / "consumer-group.png"), full_page=True)
    page.goto(f"{scene.broker.url}/console/consumer-groups/smith-bank/dlq")
    page.check(f"input[name=msg_id][value='{scene.dead_msg_id}']")
    page.screenshot(path=str(scene.shots / "dlq.png"), full_page=True)
    page.click("#resend-selected")
    page.wait_for_selector("table.audit tbody tr")
    assert dialogs.seen == [("confirm", "Resend the selected messages to the group?")]
    row = page.locator("table.audit tbody tr").first.inner_text()
    assert "resend_dead_letter" in row
    assert "ok" in row
    assert scene.dead_msg_id in row
    assert page.locator("td.resent").first.inner_text() != "-"


def test_an_account_without_admin_sees_no_buttons_and_is_refused(scene: Scene, page: Any) -> None:
    sign_in(page, scene, TELLER.access_key, TELLER.secret_key)
    half = scene.halves[2]
    page.goto(f"{scene.broker.url}/console/transactions/{half}")  # PUB on bob-bank: it may look
    assert page.text_content("#state") == "PREPARED"
    assert page.locator("#actions button").count() == 0
    assert page.is_visible("#no-actions")
    assert page.locator("#timeline").count() == 0  # the trace is an admin's, as over REST
    page.screenshot(path=str(scene.shots / "transaction-no-admin.png"), full_page=True)
    # Posting anyway, with its own session and CSRF token: refused, nothing done.
    token = csrf_of(page.content())
    refused = page.request.post(
        f"{scene.broker.url}/console/transactions/{half}/commit", form={"csrf_token": token}
    )
    assert refused.status == 403
    assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
    assert _state(scene, half) == "PREPARED"
    # An admin page is refused too.
    assert page.request.get(f"{scene.broker.url}/console/topics").status == 403


def test_a_post_without_its_csrf_token_is_refused(scene: Scene, browser: Any, page: Any) -> None:
    half = scene.halves[2]
    # An account without admin posts with its own session and token: refused by the ACL, so
    # the audit log below holds a PERMISSION_DENIED whatever ran before this test.
    teller = browser.new_context()
    try:
        teller_page = teller.new_page()
        sign_in(teller_page, scene, TELLER.access_key, TELLER.secret_key)
        teller_page.goto(f"{scene.broker.url}/console/transactions/{half}")
        token = csrf_of(teller_page.content())
        refused = teller_page.request.post(
            f"{scene.broker.url}/console/transactions/{half}/rollback", form={"csrf_token": token}
        )
        assert refused.status == 403
        assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
    finally:
        teller.close()
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    url = f"{scene.broker.url}/console/transactions/{half}/rollback"
    for form in ({}, {"csrf_token": "forged"}):
        refused = page.request.post(url, form=form)
        assert refused.status == 403
        assert refused.json()["error"]["code"] == "CSRF_INVALID"
    assert _state(scene, half) == "PREPARED"
    page.goto(f"{scene.broker.url}/console/audit")
    rows = page.locator("table.audit tbody tr")
    entries = [rows.nth(i).inner_text() for i in range(rows.count())]
    csrf = [e for e in entries if "CSRF_INVALID" in e]
    assert len(csrf) >= 2
    assert all("operator-key" in e and "rollback" in e and "refused" in e for e in csrf[:2])
    denied = [e for e in entries if "PERMISSION_DENIED" in e and "rollback" in e]
    assert denied
    assert "teller-key" in denied[0]
    assert f"transaction:{half}" in denied[0]
    page.screenshot(path=str(scene.shots / "audit.png"), full_page=True)


def test_the_other_pages_render(scene: Scene, page: Any) -> None:
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    base = scene.broker.url
    for path, shot, marker in (
        ("/console/topics", "topics.png", "transfers"),
        ("/console/producer-groups", "producer-groups.png", "bob-bank"),
        ("/console/producer-groups/bob-bank", "producer-group.png", "No instance"),
        ("/console/messages?topic=transfers&key=transfer-0", "messages.png", "transfer-0"),
        ("/console/reconciliation", "reconciliation.png", "2026-11-24"),
    ):
        page.goto(base + path)
        assert marker in page.content(), path
        page.screenshot(path=str(scene.shots / shot), full_page=True)
    page.goto(base + "/console/reconciliation/date=2026-11-24")
    assert "Report 2026-11-24" in page.frame_locator("#report").locator("h1").inner_text()


def test_a_discarded_half_offers_resume_checks(scene: Scene, page: Any, dialogs: Dialogs) -> None:
    """A half whose topic was deleted is DISCARDED by the next check round; an admin resumes its
    checks by the button."""
    with httpx.Client(base_url=scene.broker.url, auth=HalfmqAuth(OPERATOR), timeout=10) as admin:
        assert admin.post("/v1/topics", json={"name": "closed-accounts", "queues": 1}).is_success
        body = {"topic": "closed-accounts", "producer_group": "bob-bank", "body": "close 9"}
        created = admin.post("/v1/transactions", json=body)
        assert created.status_code == 201, created.text
        half = created.json()["transaction_id"]
        assert admin.delete("/v1/topics/closed-accounts").is_success
        assert admin.post(f"/v1/transactions/{half}/check").is_success  # a round, at once
    wait_until(lambda: _state(scene, half) == "DISCARDED", 15, "the half DISCARDED")
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    page.goto(f"{scene.broker.url}/console/transactions/{half}")
    assert page.text_content("#state") == "DISCARDED"
    assert page.is_visible("#action-resume-checks")
    assert "TOPIC_DELETED" in (page.text_content("dl.facts") or "")
    page.screenshot(path=str(scene.shots / "transaction-discarded.png"), full_page=True)
    page.click("#action-resume-checks")
    page.wait_for_selector("table.audit tbody tr")
    assert dialogs.seen == [("confirm", "Resume checks of this discarded half?")]
    row = page.locator("table.audit tbody tr").first.inner_text()
    assert "resume_checks" in row
    assert "ok" in row


def test_no_secret_reaches_the_broker_log(scene: Scene) -> None:
    log = scene.broker.log_path.read_text()
    assert "broker ready" in log
    for secret in (OPERATOR.secret_key, TELLER.secret_key, "a-test-session-secret"):
        assert secret not in log


# -- a new user's first hour (issue 29, item 12) -------------------------------------------------


def _job_report(directory: Path, day: dt.date, console_url: str) -> None:
    """The job's own report.html (spark_reconcile's page, its script and filters) for ``day``:
    60 double credits (critical) and 5 late acks (warning) -- more than a page of 50 rows."""
    from spark_reconcile.anomalies import KINDS, SEVERITY
    from spark_reconcile.report_page import html_report, severity_history
    from spark_reconcile.summary import Summary

    def row(kind: str, n: int) -> dict[str, Any]:
        return {"kind": kind, "severity": SEVERITY[kind], "transaction_id": f"{kind}-{n}",
                "business_id": f"b-{n}", "consumer_group": "smith-bank",
                "created_at": 1_764_000_000_000 + n, "event_at": None, "reason": "planted",
                "msg_id": f"m-{n}"}  # fmt: skip

    rows = {"double_credit": [row("double_credit", n) for n in range(60)],
            "ack_lag": [row("ack_lag", n) for n in range(5)]}  # fmt: skip
    counts = {kind: len(rows.get(kind, [])) for kind in KINDS}
    window = {"horizon": 1_764_100_000_000, "as_of": 1_764_100_000_000}
    summary = Summary(day, "test", window, counts, rows, [], ("bob",), console_url)
    folder = directory / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    html = html_report(summary, severity_history(directory, summary))
    (folder / "report.html").write_text(html)
    totals = {"critical": summary.total("critical"), "warning": summary.total("warning")}
    per_kind = {k: {"severity": SEVERITY[k], "count": n} for k, n in counts.items()}
    (folder / "summary.json").write_text(json.dumps(
        {"date": day.isoformat(), "status": summary.status, **totals, "counts": per_kind}
    ))  # fmt: skip


def test_the_framed_reports_filters_and_buttons_work(scene: Scene, page: Any) -> None:
    """The job's page in the console's frame runs its script (sandboxed: an opaque origin, so no
    cookie of the console's): the kind and severity filters and the page buttons work."""
    reports = scene.broker.log_path.parent / "reports"
    _job_report(reports, dt.date(2026, 11, 26), scene.broker.url)
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    page.goto(f"{scene.broker.url}/console/reconciliation/date=2026-11-26")
    frame = page.frame_locator("#report")
    shown = frame.locator("#shown")
    assert frame.locator("#controls").is_visible()  # hidden until its script runs
    assert shown.inner_text() == "rows 1-50 of 65"
    frame.locator("#next").click()
    assert shown.inner_text() == "rows 51-65 of 65"
    assert frame.locator("#next").is_disabled()
    frame.locator("#prev").click()
    assert shown.inner_text() == "rows 1-50 of 65"
    frame.locator("#filter-kind").select_option("ack_lag")
    assert shown.inner_text() == "rows 1-5 of 5"
    assert frame.locator("#anomalies tbody tr:visible").count() == 5
    frame.locator("#filter-kind").select_option("")
    frame.locator("#filter-severity").select_option("critical")
    assert shown.inner_text() == "rows 1-50 of 60"
    # The frame's document has an opaque origin: it cannot read the console's cookies or DOM.
    origin = page.frames[1].evaluate("() => self.origin")
    assert origin == "null"
    assert page.frames[1].evaluate(
        "() => { try { return document.cookie; } catch (e) { return 'refused'; } }"
    ) in ("", "refused")
    page.screenshot(path=str(scene.shots / "reconciliation-report.png"), full_page=True)


def test_the_navigation_fits_1366_pixels(scene: Scene, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page = context.new_page()
        sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
        for path in ("/console", "/console/transactions", "/console/reconciliation"):
            page.goto(scene.broker.url + path)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 1366, (path, width)
            boxes = [
                page.locator(selector).bounding_box()
                for selector in ("header nav a >> nth=0", "header nav a >> nth=-1",
                                 "header .who button")
            ]  # fmt: skip
            for box in boxes:
                assert box is not None
                assert box["x"] >= 0, (path, box)
                assert box["x"] + box["width"] <= 1366, (path, box)
            # One line: the first and the last link, and the sign-out button, side by side.
            assert abs(boxes[0]["y"] - boxes[1]["y"]) < 4, (path, boxes)
            assert abs(boxes[0]["y"] - boxes[2]["y"]) < 12, (path, boxes)
    finally:
        context.close()


def test_pages_ask_for_their_icon_not_favicon_ico(scene: Scene, page: Any) -> None:
    """Each page links /console/static/favicon.svg (public): the browser asks for that, never
    for /favicon.ico -- which, outside /console, the ACL gate answers 401 and logs a refusal of."""
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    sign_in(page, scene, OPERATOR.access_key, OPERATOR.secret_key)
    for path in ("/console/topics", "/console/transactions", "/console/audit"):
        page.goto(scene.broker.url + path)
    page.wait_for_timeout(500)  # the icon is fetched after the page loads
    assert not [url for url in asked if url.endswith("/favicon.ico")]
    assert f"{scene.broker.url}/console/static/favicon.svg" in asked
    assert "GET /favicon.ico" not in scene.broker.log_path.read_text()
