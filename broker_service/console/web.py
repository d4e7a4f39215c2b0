"""What every console handler shares: the console's state, rendering a page (with the session
cookie and the headers every page carries), who is asking and what they may do, the CSRF check of
every form, and the one place errors become pages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.acl.model import Need
from broker_service.acl.runtime import AclRuntime
from broker_service.api.errors import envelope, status_of
from broker_service.console import views
from broker_service.console.auditing import Auditor, action_of
from broker_service.console.sessions import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    LoginThrottle,
    Session,
    SessionSigner,
    cookie_of,
)
from broker_service.domain.audit.model import ANONYMOUS, AuditResult
from broker_service.domain.errors import DomainError
from broker_service.logs import redact
from broker_service.settings import BrokerSettings

log = logging.getLogger("halfmq.console")

# Everything a page loads comes from the broker itself; no frames, no inline script.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("broker_service.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(views.FILTERS)
    return env


def static_file(name: str) -> bytes | None:
    """A file of ``static/`` by its plain name (no path: nothing else can be read)."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    found = resources.files("broker_service.console").joinpath("static", name)
    return found.read_bytes() if found.is_file() else None


@dataclass
class Console:
    """The console's parts, in ``app.state.console``."""

    settings: BrokerSettings
    acl: AclRuntime | None
    signer: SessionSigner
    auditor: Auditor
    throttle: LoginThrottle
    templates: jinja2.Environment
    rates: views.Rates
    topic_rates: views.TopicRates


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def session_of(request: Request) -> Session | None:
    return console_of(request).signer.load(cookie_of(request.scope.get("headers", ())))


def who(request: Request) -> str:
    """The signed-in access key (the gate put it there), or "anonymous" with the ACL off."""
    key = getattr(request.state, "access_key", None)
    return key if isinstance(key, str) else ANONYMOUS


def actor_of(request: Request) -> str | None:
    """The access key an operator's action is traced under (None with the ACL off)."""
    key = getattr(request.state, "access_key", None)
    return key if isinstance(key, str) else None


def address_of(request: Request) -> str:
    return request.client.host if request.client else ""


def can(request: Request, *needs: Need) -> bool:
    """May the one asking do what ``needs`` say, by the ACL's own rules (always, with it off)?"""
    acl = console_of(request).acl
    if acl is None:
        return True
    try:
        authorize(acl.config, who(request), address_of(request), needs)
    except AclError:
        return False
    return True


def is_admin(request: Request) -> bool:
    return can(request, Need.admin())


def set_session(request: Request, response: Response, session: Session) -> None:
    console = console_of(request)
    response.set_cookie(
        COOKIE,
        console.signer.dump(session),
        max_age=int(console.signer.lifetime_seconds),
        path="/console",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page, with the CSRF token of the caller's session (an anonymous session is handed
    out to one that has none, so the page's forms can be posted)."""
    console = console_of(request)
    session = session_of(request)
    fresh = session is None
    if session is None:
        session = console.signer.new()
    html = console.templates.get_template(template).render(
        request=request,
        who=who(request),
        signed_in=bool(session.access_key),
        acl_on=console.acl is not None,
        admin=is_admin(request),
        csrf_field=CSRF_FIELD,
        csrf_token=console.signer.csrf_token(session),
        broker=console.settings.broker_name,
        **context,
    )
    response = HTMLResponse(html, status_code=status, headers=_HEADERS)
    if fresh:
        set_session(request, response, session)
    return response


class Refused(Exception):
    """A console action refused before anything was done (a missing or wrong CSRF token)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def checked_form(request: Request) -> dict[str, str]:
    """The posted form, once its CSRF token is the session's; else the refusal is audited and
    :class:`Refused` raised."""
    form = await request.form()
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    token = fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    if not console_of(request).signer.csrf_ok(session_of(request), token):
        action, subject = action_of(request.url.path)
        await console_of(request).auditor.record(
            who(request), action, subject, AuditResult.REFUSED, {"code": "CSRF_INVALID"}
        )
        raise Refused("CSRF_INVALID", "the form's CSRF token is missing or not this session's")
    return fields


def form_list(form: Any, name: str) -> list[str]:
    return [v for k, v in form.multi_items() if k == name and isinstance(v, str)]


class ConsoleRoute(APIRoute):
    """A console route: a domain error or a bad parameter is a page saying so (its status, its
    code, the domain's message, secrets masked); a refused form is the 403 envelope."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Refused as refused:
                return envelope(403, refused.code, refused.message)
            except DomainError as error:
                return _error_page(request, status_of(error), error.code, error.message)
            except RequestValidationError as error:
                first = error.errors()[0] if error.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()))
                message = f"{where}: {first.get('msg', 'invalid')}"
                return _error_page(request, 422, "INVALID_REQUEST", message)

        return guarded


def _error_page(request: Request, status: int, code: str, message: str) -> HTMLResponse:
    return render(request, "error.html", status, code=code, message=redact(message))
