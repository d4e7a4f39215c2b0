"""Reconciliation: the job's reports in ``console_reports_dir``, newest first, with the trend of
their counts; each HTML report as the job wrote it."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from broker_service.console.reports import read_reports, report_html
from broker_service.console.routes.common import router
from broker_service.console.web import console_of, render
from broker_service.domain.errors import NotFound


@router.get("/reconciliation")
async def reconciliation(request: Request) -> Response:
    directory = console_of(request).settings.console_reports_dir
    reports = read_reports(directory) if directory is not None else []
    trend = [r for r in reversed(reports) if r.critical is not None and r.warning is not None]
    top = max([1, *(int(r.critical or 0) + int(r.warning or 0) for r in trend)])
    return render(
        request,
        "reconciliation.html",
        directory=directory,
        reports=reports,
        trend=trend[-60:],
        top=top,
        clean=all(not r.critical and not r.warning for r in trend[-60:]),
    )


# The job's own page, served to the frame of its console page: its inline styles, SVG and
# script run in a sandbox without allow-same-origin -- an opaque origin, so they can read no
# cookie, call no console route (connect-src falls to default-src 'none'), post no form; a
# transaction's link opens the console in a new tab (allow-popups-to-escape-sandbox). Opened on
# its own, the same CSP sandboxes it alike.
_SANDBOX = "allow-scripts allow-popups allow-popups-to-escape-sandbox"
_REPORT_CSP = (
    f"sandbox {_SANDBOX}; default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'; "
    "frame-ancestors 'self'"
)
# The job links each transaction to the console; in the frame such a link opens a new tab (a
# console page is never framed: frame-ancestors 'none').
_TX_LINK = re.compile(r'(<td class="id tx"><a )(href=")')


@router.get("/reconciliation/{report}")
async def report(
    report: Annotated[str, Path(max_length=128)],
    request: Request,
    raw: Annotated[bool, Query()] = False,
) -> Response:
    """The report's page in the console (its frame), or with ``raw`` the job's page itself."""
    directory = console_of(request).settings.console_reports_dir
    html = None if directory is None else report_html(directory, report)
    if html is None:
        raise NotFound(f"no reconciliation report {report!r}", code="REPORT_NOT_FOUND")
    if not raw:
        found = [r for r in read_reports(directory) if r.name == report] if directory else []
        return render(
            request,
            "reconciliation_report.html",
            name=report,
            summary=found[0] if found else None,
            sandbox=_SANDBOX,
        )
    html = _TX_LINK.sub(r'\1target="_blank" rel="noopener" \2', html)
    headers = {"Content-Security-Policy": _REPORT_CSP, "X-Content-Type-Options": "nosniff"}
    return HTMLResponse(html, headers=headers)
