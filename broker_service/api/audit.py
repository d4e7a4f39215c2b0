"""The audit log's REST side: every admin action that reaches the broker over REST -- and so
every one the CLI makes, which speaks REST -- is a row of the audit log, as a console action is:
who (the access key; ``anonymous`` with the ACL off), from which address, what, on which
subject, and the result (ok, refused by the ACL, failed with the broker's error code).  A 401
(unsigned, an unknown key, a bad signature) makes no row: it names nobody, and an anonymous client
could otherwise write rows by the thousand; a 403 comes from a verified signature.

:class:`AdminAudit` is an ASGI middleware outside the ACL gate, so a refusal is recorded too. It
looks only at the routes of :data:`AUDITED`; every other request passes with one dictionary
lookup or a few suffix tests. A commit or rollback is an operator's action only without a
``producer_group`` in its body (a producer's own decision is no admin action and is not logged):
its body is kept as it passes (a few bytes) to tell which.

The row is written after the answer is sent: the client does not wait for it, and a store that
fails to take it is logged, not raised (the action itself is done or refused already).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker_service.acl.errors import AclError
from broker_service.acl.signature import signed_fields
from broker_service.domain.audit.model import ANONYMOUS, AuditResult
from broker_service.domain.audit.service import AuditService
from broker_service.domain.errors import DomainError
from broker_service.metrics import BrokerMetrics

log = logging.getLogger("halfmq.audit")

# (method, route) -> the action's name; the same names the console writes for the same action.
AUDITED: dict[tuple[str, str], str] = {
    ("POST", "/v1/topics"): "create_topic",
    ("DELETE", "/v1/topics/{topic}"): "delete_topic",
    ("POST", "/v1/transactions/{transaction_id}/commit"): "commit",
    ("POST", "/v1/transactions/{transaction_id}/rollback"): "rollback",
    ("POST", "/v1/transactions/{transaction_id}/check"): "check_now",
    ("DELETE", "/v1/producer-groups/{group}"): "delete_producer_group",
    ("POST", "/v1/consumer-groups/{group}/reset-offset"): "reset_offset",
    ("POST", "/v1/consumer-groups/{group}/dlq/{msg_id}/resend"): "resend_dead_letter",
    ("POST", "/v1/store/purge"): "purge",
    ("PUT", "/v1/acl/accounts/{access_key}"): "acl_put_account",
    ("DELETE", "/v1/acl/accounts/{access_key}"): "acl_delete_account",
    ("PUT", "/v1/acl/global-white"): "acl_global_white",
}
# Actions that are an operator's only when the body names no producer group.
_DECISIONS = frozenset({"commit", "rollback"})
_BODY_KEPT = 64 * 1024  # of a request's body, for its subject (a topic's name, the group)
_ANSWER_KEPT = 4096  # of an error answer, for its code


@dataclass(frozen=True, slots=True)
class _Route:
    action: str
    pattern: re.Pattern[str]


def _routes() -> dict[str, list[_Route]]:
    by_method: dict[str, list[_Route]] = {}
    for (method, path), action in AUDITED.items():
        by_method.setdefault(method, []).append(_Route(action, compile_path(path)[0]))
    return by_method


_ROUTES = _routes()


def match(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    """The audited action a request is, and its path parameters; None for any other request."""
    if not path.startswith("/v1/"):
        return None
    if (
        method == "POST"
        and path.startswith("/v1/transactions")
        and not path.endswith(("/commit", "/rollback", "/check"))
    ):
        return None  # the hot routes (a half, a batch) leave here
    for route in _ROUTES.get(method, ()):
        found = route.pattern.match(path)
        if found:
            return route.action, found.groupdict()
    return None


def subject_of(action: str, params: dict[str, str], body: dict[str, Any]) -> str:
    """What the action was on, as the console names it (``transaction:<id>``, ...)."""
    if "transaction_id" in params:
        return f"transaction:{params['transaction_id']}"
    if action == "create_topic":
        name = body.get("name")
        return f"topic:{name}" if isinstance(name, str) else "topics"
    if "topic" in params:
        return f"topic:{params['topic']}"
    if action == "resend_dead_letter":
        return f"consumer-group:{params['group']}"
    if action == "delete_producer_group":
        return f"producer-group:{params['group']}"
    if "group" in params:
        return f"consumer-group:{params['group']}"
    if "access_key" in params:
        return f"acl:{params['access_key']}"
    return "acl" if action.startswith("acl_") else "store"


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _signer(scope: Scope) -> str | None:
    """The access key a request was signed with.  Read from its headers, not from the state the
    gate leaves: a request here is answered already, and only a verified signature gets past
    401 (which makes no row)."""
    try:
        return signed_fields(scope.get("headers", ())).values[0]
    except AclError:  # a malformed header: the gate has said so already (401)
        return None


class AdminAudit:
    def __init__(
        self, app: ASGIApp, audit: AuditService | None, metrics: BrokerMetrics, acl_on: bool
    ) -> None:
        self.app = app
        self.audit = audit
        self.metrics = metrics
        self.acl_on = acl_on  # off: nobody signs in, every row is ``anonymous``

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http" and self.audit is not None:
            found = match(scope["method"], scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        action, params = found
        body = bytearray()
        answer = bytearray()
        status = 0

        async def keep_body() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) < _BODY_KEPT:
                body.extend(message.get("body", b"")[: _BODY_KEPT - len(body)])
            return message

        async def keep_answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif (
                message["type"] == "http.response.body"
                and status >= 400
                and len(answer) < _ANSWER_KEPT
            ):
                answer.extend(message.get("body", b"")[: _ANSWER_KEPT - len(answer)])
            await send(message)

        try:
            await self.app(scope, keep_body, keep_answer)
        finally:
            await self._record(scope, action, params, bytes(body), status, bytes(answer))

    async def _record(
        self,
        scope: Scope,
        action: str,
        params: dict[str, str],
        raw: bytes,
        status: int,
        answer: bytes,
    ) -> None:
        fields = _json(raw)
        if action in _DECISIONS and fields.get("producer_group") is not None:
            return  # a producer's own decision, not an operator's
        if status == 401:
            # Unsigned, an unknown key or a bad signature: nobody to name, and no row an
            # anonymous client could make by the thousand (the gate's metrics count them).
            return
        if 200 <= status < 400:
            result = AuditResult.OK
        elif status in (401, 403):
            result = AuditResult.REFUSED
        else:
            result = AuditResult.FAILED
        client = scope.get("client")
        detail: dict[str, Any] = {
            "address": client[0] if client else "",
            "via": "rest",
            "status": status,
        }
        if status >= 400:
            error = _json(answer).get("error")
            if isinstance(error, dict) and isinstance(error.get("code"), str):
                detail["code"] = error["code"]
        self.metrics.audit_actions.labels(action=action, result=result.value).inc()
        assert self.audit is not None  # checked before the request was matched
        try:
            await self.audit.record(
                (self.acl_on and _signer(scope)) or ANONYMOUS,
                action,
                subject_of(action, params, fields),
                result,
                detail,
            )
        except DomainError as error:
            log.warning("audit entry %s not written: %s", action, error.code)
        except Exception:  # the action is done; its row is not worth an unhandled error
            log.exception("audit entry %s not written", action)
