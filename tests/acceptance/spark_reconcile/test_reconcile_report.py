"""The report of a run, given its figures: the verdict (info never raises it), ``summary.json``
as the console and the demo read it, and the HTML page -- its legend, its totals per severity,
the trend read from the earlier days' ``summary.json``, every anomaly listed, escaped, and
linked to the console when a console URL is configured.  The page is then opened in headless
Chromium: filtered by kind, paged, a link's href read, and photographed."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

from typer.testing import CliRunner

from spark_reconcile import cli
from spark_reconcile.anomalies import KINDS, SEVERITY
from spark_reconcile.config import HOUR_MS, ReconcileConfig, Window, day_start_ms
from spark_reconcile.report import write_report
from spark_reconcile.report_page import transaction_link
from spark_reconcile.summary import Summary

DAY = dt.date(2026, 11, 20)
CONSOLE = "https://broker.example:8080"
CHROMIUM = "/usr/bin/chromium"
SHOT = os.environ.get("HALFMQ_REPORT_SHOT")  # also copy the screenshot here (docs/images)


def anomaly(kind: str, i: int, **extra: Any) -> dict[str, Any]:
    at = int(dt.datetime(2026, 11, 20, 9, tzinfo=dt.UTC).timestamp() * 1000) + i * 60_000
    return {
        "kind": kind,
        "severity": SEVERITY[kind],
        "transaction_id": f"tx-{kind}-{i:03d}",
        "msg_id": f"m-{kind}-{i:03d}",
        "keys": json.dumps([f"t-{i}"]),
        "business_id": f"t-{i}",
        "consumer_group": "bank-smith" if kind in ("ack_lag", "dead_lettered") else None,
        "created_at": at,
        "event_at": at + 5_000,
        "reason": f"{kind} number {i}",
        **extra,
    }


def summary(
    listed: dict[str, int],
    day: dt.date = DAY,
    console_url: str | None = None,
    extra: tuple[dict[str, Any], ...] = (),
) -> Summary:
    rows: dict[str, list[dict[str, Any]]] = {
        kind: [anomaly(kind, i) for i in range(n)] for kind, n in listed.items()
    }
    for row in extra:
        rows.setdefault(row["kind"], []).append(row)
    counts = {kind: len(rows.get(kind, [])) for kind in KINDS}
    return Summary(
        day=day,
        source="sqlite:///broker.db",
        window=dataclasses.asdict(Window.for_day(day, as_of=day_start_ms(day) + 26 * HOUR_MS)),
        counts=counts,
        rows=rows,
        trend=[(day, counts)],
        ledgers=("bob", "smith"),
        console_url=console_url,
    )


def report_dir(out: Path, day: dt.date = DAY) -> Path:
    return out / "report" / f"date={day.isoformat()}"


def test_only_resolved_dead_letters_leave_the_day_clean(tmp_path: Path) -> None:
    resolved = summary({"dead_letter_resolved": 2})
    assert (resolved.status, resolved.exit_code) == ("clean", 0)
    write_report(resolved, report_dir(tmp_path))
    data = json.loads((report_dir(tmp_path) / "summary.json").read_text())
    assert (data["status"], data["exit_code"]) == ("clean", 0)
    assert (data["critical"], data["warning"], data["info"]) == (0, 0, 2)
    assert data["counts"]["dead_letter_resolved"] == {"severity": "info", "count": 2}
    md = (report_dir(tmp_path) / "summary.md").read_text()
    assert md.startswith("# halfmq reconciliation 2026-11-20: clean")
    assert "0 critical, 0 warning, 2 info" in md

    mixed = summary({"dead_letter_resolved": 1, "dead_lettered": 1})
    assert (mixed.status, mixed.exit_code) == ("warnings", 1)


def test_the_page_lists_every_anomaly_with_a_legend_and_totals(tmp_path: Path) -> None:
    s = summary({"ack_lag": 120, "double_credit": 3, "dead_letter_resolved": 2})
    write_report(s, report_dir(tmp_path))
    page = (report_dir(tmp_path) / "report.html").read_text()
    table = page[page.index('<table id="anomalies">') :]
    assert table.count("<tr data-kind=") == 125  # every one, not a sample
    for kind in KINDS:  # the legend: every kind, what it means, what to do
        assert f"<code>{kind}</code>" in page
    assert "make the consumer idempotent" in page
    assert re.search(r'id="total-critical">3<', page)
    assert re.search(r'id="total-warning">120<', page)
    assert re.search(r'id="total-info">2<', page)
    first = table.index("tx-double_credit-000")  # critical rows first
    assert first < table.index("tx-ack_lag-000") < table.index("tx-dead_letter_resolved-000")
    assert "http" not in page  # no external asset, and no console configured: no link


def test_data_is_escaped_and_ids_link_to_the_console_when_configured(tmp_path: Path) -> None:
    hostile = anomaly(
        "stuck_half",
        7,
        transaction_id='<script>alert("x")</script>&/?#',
        reason="<b>bold</b>",
        business_id="<i>",
    )
    linked = summary({}, console_url=CONSOLE + "/", extra=(hostile,))
    write_report(linked, tmp_path / "linked")
    page = (tmp_path / "linked" / "report.html").read_text()
    for raw in ("<script>alert", "<b>bold", "<i>"):
        assert raw not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;/?#" in page
    href = transaction_link(CONSOLE + "/", hostile["transaction_id"])
    assert href == (
        f"{CONSOLE}/console/transactions/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E%26%2F%3F%23"
    )
    assert f'<a href="{href}">' in page

    plain = summary({}, extra=(hostile,))
    write_report(plain, tmp_path / "plain")
    page = (tmp_path / "plain" / "report.html").read_text()
    assert "/console/transactions/" not in page
    assert "--console-url" in page  # says how to get the links


def test_the_trend_reads_the_earlier_days_summaries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    earlier = {DAY - dt.timedelta(days=3): {"amount_mismatch": 2, "ack_lag": 1}}
    earlier[DAY - dt.timedelta(days=1)] = {"stuck_half": 4}
    for day, listed in earlier.items():
        write_report(summary(listed, day), report_dir(out, day))
    (report_dir(out, DAY - dt.timedelta(days=5)) / "summary.json").parent.mkdir(parents=True)
    (report_dir(out, DAY - dt.timedelta(days=5)) / "summary.json").write_text("not json")
    write_report(summary({"dead_letter_resolved": 1}), report_dir(out))
    page = (report_dir(out) / "report.html").read_text()
    svg = page[page.index('<svg id="trend"') : page.index("</svg>")]
    assert "<title>2026-11-17: 2 critical</title>" in svg
    assert "<title>2026-11-17: 1 warning</title>" in svg
    assert "<title>2026-11-18: no report</title>" in svg
    assert "<title>2026-11-19: 4 warning</title>" in svg
    assert "<title>2026-11-20: 1 info</title>" in svg
    assert "2026-11-15" not in svg  # an unreadable summary is not a day of the trend
    assert "the last 4 days" in page


def test_a_console_url_that_is_not_a_plain_base_url_is_refused(tmp_path: Path) -> None:
    def config(url: str) -> ReconcileConfig:
        return ReconcileConfig(day=DAY, out=str(tmp_path), parquet="x", console_url=url)

    assert config(CONSOLE).console_url == CONSOLE
    for bad in ("ftp://broker", "broker:8080", "https://ops:s3cret@broker", "https://b/?x=1"):
        with pytest.raises(ValueError, match="console URL"):
            config(bad)
    app = typer.Typer()
    app.command("reconcile")(cli.reconcile)
    app.command("export")(cli.export)  # two commands: named as the halfmq app names them
    args = ["reconcile", "--date", DAY.isoformat(), "--parquet", str(tmp_path)]
    done = CliRunner().invoke(app, args, env={"HALFMQ_CONSOLE_URL": "https://ops:s3cret@b"})
    assert done.exit_code == 2
    assert "console URL must not carry a user or password" in " ".join(done.output.split())
    assert "s3cret" not in done.output


@pytest.mark.slow
def test_the_page_in_chromium_filters_pages_and_links(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "out"
    days = {
        DAY - dt.timedelta(days=6): {"ack_lag": 12, "stuck_half": 2},
        DAY - dt.timedelta(days=5): {"ack_lag": 20, "double_credit": 1},
        DAY - dt.timedelta(days=4): {"ack_lag": 7},
        DAY - dt.timedelta(days=2): {"ack_lag": 30, "dead_lettered": 2, "amount_mismatch": 2},
        DAY - dt.timedelta(days=1): {"ack_lag": 15, "dead_letter_resolved": 1},
    }
    for day, listed in days.items():
        write_report(summary(listed, day), report_dir(out, day))
    today = {
        "stuck_half": 3,
        "ack_lag": 64,
        "dead_lettered": 1,
        "dead_letter_resolved": 2,
        "debit_without_credit": 1,
        "double_credit": 2,
    }
    write_report(summary(today, console_url=CONSOLE), report_dir(out))
    page_file = report_dir(out) / "report.html"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_file.as_uri())
            visible = page.locator("#anomalies tbody tr:visible")
            assert page.text_content("#status") == "critical"
            assert page.text_content("#shown") == "rows 1-50 of 73"
            assert visible.count() == 50
            page.click("#next")
            assert page.text_content("#shown") == "rows 51-73 of 73"
            assert visible.count() == 23

            page.select_option("#filter-kind", "dead_letter_resolved")
            assert visible.count() == 2
            assert page.text_content("#shown") == "rows 1-2 of 2"
            assert {r.get_attribute("data-kind") for r in visible.all()} == {"dead_letter_resolved"}
            link = visible.first.locator("a")
            assert link.text_content() == "tx-dead_letter_resolved-000"
            assert link.get_attribute("href") == (
                f"{CONSOLE}/console/transactions/tx-dead_letter_resolved-000"
            )

            page.select_option("#filter-kind", "")
            page.select_option("#filter-severity", "critical")
            assert page.text_content("#shown") == "rows 1-2 of 2"
            page.click('a.show-kind[data-kind="stuck_half"]')  # the legend's count filters
            assert page.text_content("#shown") == "rows 1-3 of 3"

            page.select_option("#filter-kind", "")
            page.select_option("#filter-severity", "")
            shot = tmp_path / "reconcile-report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    if SHOT:
        shutil.copyfile(shot, SHOT)
