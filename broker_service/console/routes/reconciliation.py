"""Reconciliation: the job's reports in ``console_reports_dir``, newest first, with the trend of
their counts; each HTML report as the job wrote it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request, Response
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
    )


@router.get("/reconciliation/{report}")
async def report(report: Annotated[str, Path(max_length=128)], request: Request) -> Response:
    directory = console_of(request).settings.console_reports_dir
    html = None if directory is None else report_html(directory, report)
    if html is None:
        raise NotFound(f"no reconciliation report {report!r}", code="REPORT_NOT_FOUND")
    # The job's own page (inline styles, an inline SVG): shown sandboxed, scripts off.
    headers = {
        "Content-Security-Policy": "sandbox; default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(html, headers=headers)
