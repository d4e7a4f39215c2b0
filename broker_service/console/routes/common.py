"""The router every console module adds its routes to, and the redirect after an action."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import RedirectResponse

from broker_service.console.web import ConsoleRoute

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def back_to(path: str) -> RedirectResponse:
    """After a form: see the page again (post/redirect/get), its audit log saying how it went."""
    return RedirectResponse(path, status_code=303)
