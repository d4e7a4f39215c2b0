"""The audit log: every console action and refusal, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request, Response

from broker_service.api import permissions as rules
from broker_service.api.permissions import needs
from broker_service.console.routes.common import router
from broker_service.console.web import console_of, render


@router.get("/audit")
@needs(rules.admin)
async def audit(
    request: Request,
    subject: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Response:
    entries = await console_of(request).auditor.entries(subject or None, limit)
    return render(request, "audit.html", audit=entries, subject=subject or "")
