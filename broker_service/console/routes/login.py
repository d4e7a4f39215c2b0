"""Signing in and out, and the console's static files (public: the login page needs them)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import mimetypes
from typing import Annotated

from fastapi import Path, Request, Response
from fastapi.responses import RedirectResponse

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.api import permissions as rules
from broker_service.api.permissions import needs
from broker_service.console.routes.common import back_to, router
from broker_service.console.sessions import LoginThrottle
from broker_service.console.web import (
    address_of,
    checked_form,
    console_of,
    render,
    session_of,
    set_session,
    static_file,
)
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.errors import NotFound

_DUMMY_SECRET = "x" * 32  # compared against when the access key is unknown: the same work

log = logging.getLogger("halfmq.console")


def _safe_next(value: str | None) -> str:
    """Only a console path (no scheme, no host, no //): never an open redirect."""
    if value and value.startswith("/console") and "//" not in value and "\\" not in value:
        return value
    return "/console"


@router.get("/login")
@needs(rules.public)
async def login_page(request: Request, next: str | None = None) -> Response:
    if console_of(request).acl is None:
        return RedirectResponse("/console", status_code=303)
    return render(request, "login.html", next=_safe_next(next), failure=None)


@router.post("/login")
@needs(rules.public)
async def login(request: Request) -> Response:
    console = console_of(request)
    if console.acl is None:
        return RedirectResponse("/console", status_code=303)
    address = address_of(request)  # the peer's (a forwarded header only from a listed proxy)
    throttle = console.throttle
    wait = throttle.wait_for(address)
    if wait > 0:
        failure = f"too many failed sign-ins from {address}: try again in {int(wait) + 1} s"
        return render(request, "login.html", 429, next="/console", failure=failure)
    form = await checked_form(request)
    access_key = form.get("access_key", "")
    secret_key = form.get("secret_key", "")
    wait = throttle.wait_for_account(access_key)
    if wait > 0:  # (the key is not echoed: a secret typed into its field would be)
        failure = f"too many failed sign-ins for this access key: try again in {int(wait) + 1} s"
        return render(request, "login.html", 429, next="/console", failure=failure)
    config = console.acl.config
    account = config.account(access_key)
    expected = account.secret_key if account is not None else _DUMMY_SECRET
    matches = hmac.compare_digest(secret_key.encode(), expected.encode())
    reason = "ok"
    if account is None or not matches:
        reason = "SECRET_WRONG"
    else:
        try:
            authorize(config, access_key, address, [])  # the white lists, as for its requests
        except AclError as error:
            reason = str(error.code)
    if reason != "ok" or account is None:
        known = access_key if account is not None else None
        _note_throttled(throttle, address, known, *throttle.failed(address, access_key))
        await asyncio.sleep(throttle.delay)
        await console.auditor.record(
            known or "unknown",
            "login",
            "console",
            AuditResult.REFUSED,
            {"code": reason, "address": address},
        )
        failure = "the access key or the secret key is wrong, or not allowed from here"
        return render(
            request, "login.html", 401, next=_safe_next(form.get("next")), failure=failure
        )
    throttle.succeeded(address, access_key)
    await console.auditor.record(
        access_key, "login", "console", AuditResult.OK, {"address": address}
    )
    response = back_to(_safe_next(form.get("next")))
    set_session(request, response, console.signer.new(access_key, account.secret_key))
    return response


def _note_throttled(
    throttle: LoginThrottle, address: str, known: str | None, by_address: bool, by_account: bool
) -> None:
    """One log line when a failure starts a wait (an unknown access key is not named: it may be
    a secret typed into the wrong field)."""
    window = int(throttle.window_seconds)
    if by_address:
        log.warning("console sign-in: %d failures from %s in %d s: that address now waits",
                    throttle.limit, address, window)  # fmt: skip
    if by_account:
        key = "an unknown access key" if known is None else f"access key {known!r}"
        log.warning("console sign-in: %d failures for %s in %d s, the last from %s: that "
                    "access key now waits", throttle.account_limit, key, window, address)  # fmt: skip


@router.post("/logout")
@needs(rules.signed_in)
async def logout(request: Request) -> Response:
    await checked_form(request)
    console = console_of(request)
    session = session_of(request)
    who = session.access_key if session is not None else None
    await console.auditor.record(who, "logout", "console", AuditResult.OK)
    response = back_to("/console/login")
    set_session(request, response, console.signer.new())  # anonymous again
    return response


@router.get("/static/{name}")
@needs(rules.public)
async def static(name: Annotated[str, Path(max_length=64)]) -> Response:
    content = static_file(name)
    if content is None:
        raise NotFound(f"no console file {name!r}", code="NOT_FOUND")
    media = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(
        content,
        media_type=media,
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )
