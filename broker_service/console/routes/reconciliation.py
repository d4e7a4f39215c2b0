"""Reconciliation: the job's reports in ``console_reports_dir``, newest first, with the trend of
their counts; each HTML report as the job wrote it, beside its breaks, whose status an admin sets
(open, acknowledged, explained with a note, resolved by hand): stored in the broker's store for
the job's next runs, and audited like every console action."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from broker_service.api import permissions as rules
from broker_service.api.permissions import needs
from broker_service.console.reports import Break, read_report, read_reports, report_html
from broker_service.console.routes.common import back_to, router
from broker_service.console.web import actor_of, checked_form, console_of, is_admin, render, who
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.errors import DomainError, InvalidRequest, NotFound
from broker_service.domain.ports import StoreTx
from broker_service.domain.ports.breaks import BREAK_STATUSES, BreakStatus
from broker_service.domain.transactions.service import TransactionService

MAX_NOTE = 2000
BreakPath = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")]
ReportPath = Annotated[str, Path(max_length=128)]


@router.get("/reconciliation")
@needs(rules.admin)
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


def _service(request: Request) -> TransactionService:
    service: TransactionService = request.app.state.transactions
    return service


def subject_of(break_id: str) -> str:
    return f"break:{break_id}"


async def _statuses(request: Request, breaks: tuple[Break, ...]) -> dict[str, BreakStatus]:
    ids = [b.break_id for b in breaks]

    def unit(tx: StoreTx) -> dict[str, BreakStatus]:
        return tx.break_statuses(ids)

    return await _service(request).store.read(unit) if ids else {}


@router.get("/reconciliation/{report}")
@needs(rules.admin)
async def report(
    report: ReportPath,
    request: Request,
    raw: Annotated[bool, Query()] = False,
) -> Response:
    """The report's page in the console (its frame and its breaks), or with ``raw`` the job's
    page itself."""
    directory = console_of(request).settings.console_reports_dir
    html = None if directory is None else report_html(directory, report)
    if html is None:
        raise NotFound(f"no reconciliation report {report!r}", code="REPORT_NOT_FOUND")
    if not raw:
        found = read_report(directory, report) if directory is not None else None
        breaks = found.breaks if found is not None else ()
        return render(
            request,
            "reconciliation_report.html",
            name=report,
            summary=found,
            breaks=breaks,
            statuses=await _statuses(request, breaks),
            choices=BREAK_STATUSES,
            may_set=is_admin(request),
            sandbox=_SANDBOX,
        )
    html = _TX_LINK.sub(r'\1target="_blank" rel="noopener" \2', html)
    headers = {"Content-Security-Policy": _REPORT_CSP, "X-Content-Type-Options": "nosniff"}
    return HTMLResponse(html, headers=headers)


@router.post("/reconciliation/{report}/breaks/{break_id}/status")
@needs(rules.admin)
async def set_status(report: ReportPath, break_id: BreakPath, request: Request) -> Response:
    """An admin's status for one break the report lists: stored for the job's next runs and
    audited (refused without the permission by the ACL gate, audited there too)."""
    form = await checked_form(request)
    auditor = console_of(request).auditor
    subject = subject_of(break_id)
    try:
        listed = _listed(request, report, break_id)
        status = _status_of(form, listed, report, actor_of(request), _service(request).clock())

        def unit(tx: StoreTx) -> None:
            tx.set_break_status(status)

        await _service(request).store.write(unit)
    except DomainError as error:
        failed = {"code": error.code, "message": error.message, "report": report}
        await auditor.record(who(request), "set_break_status", subject, AuditResult.FAILED, failed)
        raise
    done = {"status": status.status, "kind": status.kind, "report": report, "note": status.note}
    await auditor.record(who(request), "set_break_status", subject, AuditResult.OK, done)
    return back_to(f"/console/reconciliation/{report}#break-{break_id}")


def _listed(request: Request, report: str, break_id: str) -> Break:
    """The break as the report lists it: an id no report lists cannot be given a status."""
    directory = console_of(request).settings.console_reports_dir
    found = read_report(directory, report) if directory is not None else None
    if found is None:
        raise NotFound(f"no reconciliation report {report!r}", code="REPORT_NOT_FOUND")
    listed = next((b for b in found.breaks if b.break_id == break_id), None)
    if listed is None:
        raise NotFound(f"report {report!r} lists no break {break_id!r}", code="BREAK_NOT_FOUND")
    return listed


def _status_of(
    form: dict[str, str], listed: Break, report: str, actor: str | None, now: int
) -> BreakStatus:
    """The posted status, checked: one of the statuses, a note for ``explained``."""
    status = form.get("status", "")
    note = form.get("note", "").strip() or None
    if status not in BREAK_STATUSES:
        raise InvalidRequest(
            f"status must be one of {', '.join(BREAK_STATUSES)}", code="INVALID_STATUS"
        )
    if status == "explained" and note is None:
        raise InvalidRequest("an explained break needs a note saying why", code="NOTE_REQUIRED")
    if note is not None and len(note) > MAX_NOTE:
        raise InvalidRequest(f"the note is longer than {MAX_NOTE} characters", code="NOTE_TOO_LONG")
    return BreakStatus(
        break_id=listed.break_id,
        status=status,
        note=note,
        kind=listed.kind,
        report=report,
        actor=actor,
        updated_at=now,
    )
