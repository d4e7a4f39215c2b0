"""Topics: queues, their offsets and the rate into each (messages per second over the last minute,
from the offsets the store holds); an admin creates and deletes them."""

from __future__ import annotations

from fastapi import Request, Response

from broker_service.api import permissions as rules
from broker_service.api.params import UserTopicName
from broker_service.api.permissions import needs
from broker_service.console.routes.common import back_to, router
from broker_service.console.web import checked_form, console_of, render, who
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.errors import DomainError, InvalidRequest
from broker_service.domain.messages.service import MessageService


@router.get("/topics")
@needs(rules.admin)
async def topics(request: Request) -> Response:
    service: MessageService = request.app.state.messages
    views = sorted(await service.list_topics(), key=lambda v: v.topic.name)
    rates = console_of(request).topic_rates.observe(views)
    audit = await console_of(request).auditor.entries("topics", limit=20)
    return render(request, "topics.html", topics=views, rates=rates, audit=audit)


def _queues(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidRequest(f"queues {text!r} is not a number", code="INVALID_QUEUES") from None


@router.post("/topics")
@needs(rules.admin)
async def create_topic(request: Request) -> Response:
    form = await checked_form(request)
    name = form.get("name", "").strip()
    service: MessageService = request.app.state.messages
    auditor = console_of(request).auditor
    detail = {"topic": name, "queues": form.get("queues", ""), "ordered": "ordered" in form}
    try:
        created = await service.create_topic(
            name, _queues(form.get("queues", "")), "ordered" in form
        )
    except DomainError as error:
        detail |= {"code": error.code, "message": error.message}
        await auditor.record(who(request), "create_topic", "topics", AuditResult.FAILED, detail)
        return back_to("/console/topics")
    detail["created"] = created.created
    await auditor.record(who(request), "create_topic", "topics", AuditResult.OK, detail)
    return back_to("/console/topics")


@router.post("/topics/{topic}/delete")
@needs(rules.admin)
async def delete_topic(topic: UserTopicName, request: Request) -> Response:
    await checked_form(request)
    service: MessageService = request.app.state.messages
    auditor = console_of(request).auditor
    try:
        await service.delete_topic(topic)
    except DomainError as error:
        detail = {"topic": topic, "code": error.code, "message": error.message}
        await auditor.record(who(request), "delete_topic", "topics", AuditResult.FAILED, detail)
        return back_to("/console/topics")
    await auditor.record(who(request), "delete_topic", "topics", AuditResult.OK, {"topic": topic})
    return back_to("/console/topics")
