"""The breaks of a reconciliation report in the console, against the real broker process of
``conftest.scene`` (ACL on, SQLite): an admin sets a break's status (acknowledged, explained with
a note, resolved by hand), which is stored for the job's next runs and audited; an account
without admin is refused and the refusal audited; bad input is a clear error, audited as failed.
In Debian's chromium: the job's page shows its new sections (open breaks, ages, per kind, every
break with its state and status) in the console's frame, and the console's form sets a status.

The report is written by the job's own code (``spark_reconcile.report.write_report``) from a
summary with breaks, as a run leaves it."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.integration.console.conftest import OPERATOR, TELLER, Scene, csrf_of

pytestmark = pytest.mark.slow

DAY = dt.date(2026, 11, 27)
NAME = f"date={DAY.isoformat()}"
STUCK = "0123456789abcdef"  # the break ids the job would give (16 hex digits)
CREDIT = "fedcba9876543210"
GONE = "00000000000000aa"
AS_OF = 1_764_300_000_000
DAY_MS = 86_400_000


def _row(break_id: str, kind: str, severity: str, state: str, **more: Any) -> dict[str, Any]:
    return {
        "break_id": break_id, "kind": kind, "severity": severity, "transaction_id": f"tx-{break_id[:4]}",
        "msg_id": "m-1", "business_id": more.get("business_id"), "consumer_group": None,
        "created_at": AS_OF - more.get("age_ms", DAY_MS // 2), "event_at": None,
        "reason": f"planted {kind}", "first_seen": more.get("first_seen", DAY.isoformat()),
        "state": state, "previous_kind": more.get("previous_kind"), "amount": more.get("amount"),
        "status": more.get("status", "open"), "note": None, "actor": None, "updated_at": None,
        "age_ms": more.get("age_ms", DAY_MS // 2), "age_bucket": more.get("bucket", "<1d"),
        "overdue": more.get("overdue", False),
    }  # fmt: skip


def _write_job_report(directory: Path) -> None:
    """A day with a stuck half carried from four days ago (overdue), a new credit without a
    debit of 12,500 at stake, and a break the data resolved since."""
    from spark_reconcile.anomalies import KINDS, SEVERITY
    from spark_reconcile.report import write_report
    from spark_reconcile.summary import BreakFigures, Summary

    rows = [
        _row(STUCK, "stuck_half", "warning", "still_open", age_ms=4 * DAY_MS + 5,
             first_seen="2026-11-23", bucket="3-7d", overdue=True),
        _row(CREDIT, "credit_without_debit", "critical", "new", business_id="tr-9",
             amount=12_500),
        _row(GONE, "ack_lag", "warning", "resolved", status="closed"),
    ]  # fmt: skip
    groups = [
        {"kind": r["kind"], "severity": r["severity"], "state": r["state"], "status": r["status"],
         "age_bucket": r["age_bucket"], "overdue": r["overdue"], "count": 1,
         "amount": r["amount"], "oldest_ms": r["age_ms"]}
        for r in rows
    ]  # fmt: skip
    anomalies = {"credit_without_debit": [dict(rows[1])]}
    counts = {kind: len(anomalies.get(kind, [])) for kind in KINDS}
    summary = Summary(
        day=DAY,
        source="test",
        window={"start": AS_OF - DAY_MS, "end": AS_OF, "horizon": AS_OF, "as_of": AS_OF},
        counts=counts,
        rows=anomalies,
        trend=[],
        ledgers=("bob", "smith"),
        breaks=BreakFigures.of(groups, rows, statuses_from="the store: 0 status(es)"),
    )
    assert SEVERITY["credit_without_debit"] == "critical"
    write_report(summary, directory / NAME)


@pytest.fixture(scope="module")
def report(scene: Scene) -> str:
    _write_job_report(scene.broker.log_path.parent / "reports")
    return NAME


@contextmanager
def _signed_in(scene: Scene, key: str, secret: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=scene.broker.url, timeout=10) as client:
        form = {"csrf_token": csrf_of(client.get("/console/login").text)}
        form |= {"access_key": key, "secret_key": secret}
        assert client.post("/console/login", data=form).status_code == 303
        yield client


def _post(client: httpx.Client, break_id: str, **form: str) -> httpx.Response:
    token = csrf_of(client.get(f"/console/reconciliation/{NAME}").text)
    path = f"/console/reconciliation/{NAME}/breaks/{break_id}/status"
    return client.post(path, data={"csrf_token": token, **form})


def _stored(scene: Scene, break_id: str) -> Any:
    engine = sa.create_engine(scene.broker.database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT * FROM reconcile_break_statuses WHERE break_id = :b"),
                {"b": break_id},
            ).one_or_none()
    finally:
        engine.dispose()


def _audit(client: httpx.Client, break_id: str) -> str:
    return client.get("/console/audit", params={"subject": f"break:{break_id}"}).text


def test_an_admin_sets_a_status_stored_and_audited(scene: Scene, report: str) -> None:
    with _signed_in(scene, OPERATOR.access_key, OPERATOR.secret_key) as operator:
        page = operator.get(f"/console/reconciliation/{report}").text
        assert f'id="break-{STUCK}"' in page
        assert f'action="/console/reconciliation/date%3D2026-11-27/breaks/{STUCK}/status"' in page
        assert "closed by the job" in page  # the resolved break: no form, the job closed it
        assert page.count('name="status"') == 2

        done = _post(operator, STUCK, status="explained", note="bank holiday: settles Monday")
        assert done.status_code == 303, done.text
        assert done.headers["location"].endswith(f"#break-{STUCK}")
        row = _stored(scene, STUCK)
        assert (row.status, row.note, row.kind) == (
            "explained",
            "bank holiday: settles Monday",
            "stuck_half",
        )
        assert (row.actor, row.report) == (OPERATOR.access_key, NAME)
        page = operator.get(f"/console/reconciliation/{report}").text
        shown = re.search(rf'id="break-{STUCK}".*?</tr>', page, re.S)
        assert shown is not None
        assert "explained: bank holiday: settles Monday" in shown.group(0)

        assert _post(operator, STUCK, status="acknowledged").status_code == 303
        assert _stored(scene, STUCK).status == "acknowledged"
        audit = _audit(operator, STUCK)
        assert audit.count("set_break_status") >= 2
        assert "bank holiday: settles Monday" in audit


def test_bad_input_is_a_clear_error_and_audited_as_failed(scene: Scene, report: str) -> None:
    with _signed_in(scene, OPERATOR.access_key, OPERATOR.secret_key) as operator:
        no_note = _post(operator, CREDIT, status="explained")
        assert no_note.status_code == 422
        assert "NOTE_REQUIRED" in no_note.text
        wrong = _post(operator, CREDIT, status="fixed")
        assert wrong.status_code == 422
        assert "INVALID_STATUS" in wrong.text
        assert _stored(scene, CREDIT) is None
        unknown = _post(operator, "1111111111111111", status="acknowledged")
        assert unknown.status_code == 404
        assert "BREAK_NOT_FOUND" in unknown.text
        closed = _post(operator, "not-a-break-id", status="acknowledged")
        assert closed.status_code == 422  # the path's pattern: never reaches the store
        audit = _audit(operator, CREDIT)
        assert "NOTE_REQUIRED" in audit
        assert "INVALID_STATUS" in audit
        assert "Traceback" not in no_note.text + wrong.text + unknown.text


def test_without_admin_the_change_is_refused_and_audited(scene: Scene, report: str) -> None:
    with _signed_in(scene, TELLER.access_key, TELLER.secret_key) as teller:
        path = f"/console/reconciliation/{NAME}/breaks/{CREDIT}/status"
        token = csrf_of(teller.get("/console").text)  # the sign-out form's token
        refused = teller.post(path, data={"csrf_token": token, "status": "resolved"})
        assert refused.status_code == 403
        assert _stored(scene, CREDIT) is None
    with _signed_in(scene, OPERATOR.access_key, OPERATOR.secret_key) as operator:
        audit = operator.get("/console/audit").text
        refusal = (
            r"<tr>(?:(?!</tr>).)*teller-key(?:(?!</tr>).)*set_break_status"
            rf"(?:(?!</tr>).)*break:{CREDIT}(?:(?!</tr>).)*refused"
        )
        assert re.search(refusal, audit, re.S | re.I), audit[-2000:]
        no_token = operator.post(path, data={"status": "resolved"})
        assert no_token.status_code == 403
        assert _stored(scene, CREDIT) is None


def test_the_new_sections_in_chromium(scene: Scene, report: str, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(f"{scene.broker.url}/console/login")
        page.fill("input[name=access_key]", OPERATOR.access_key)
        page.fill("input[name=secret_key]", OPERATOR.secret_key)
        page.click("button[type=submit]")
        page.goto(f"{scene.broker.url}/console/reconciliation/{report}")
        frame = page.frame_locator("#report")
        title = frame.locator("#breaks-title").inner_text()
        assert "Open breaks: 2 (1 new, 1 carried from earlier days)" in title
        assert "1 closed by the data, 1 overdue" in title
        assert frame.locator('#ages td[data-bucket="3-7d"]').inner_text() == "1"
        credit = frame.locator('#breaks-per-kind tr[data-kind="credit_without_debit"]')
        assert "12,500" in credit.inner_text()
        stuck = frame.locator(f'#breaks tr[data-break="{STUCK}"]')
        assert "overdue" in stuck.inner_text()
        assert "2026-11-23" in stuck.inner_text()
        gone = frame.locator(f'#breaks tr[data-break="{GONE}"]')
        assert "closed by the job" in gone.inner_text()

        row = page.locator(f"#break-{CREDIT}")
        row.locator("select[name=status]").select_option("explained")
        row.locator("input[name=note]").fill("refund booked by Smith's bank")
        row.locator("button[type=submit]").click()
        page.wait_for_url(f"**/console/reconciliation/{NAME}#break-{CREDIT}")
        status = page.locator(f"#break-{CREDIT} .break-status").inner_text()
        assert "explained: refund booked by Smith's bank" in status
        page.frame_locator("#report").locator("#breaks").wait_for()  # the reloaded frame
        page.screenshot(path=str(scene.shots / "reconciliation-breaks.png"), full_page=True)
    finally:
        context.close()
