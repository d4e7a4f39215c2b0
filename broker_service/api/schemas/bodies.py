"""A JSON request body validated by pydantic straight from its bytes, for the hottest route.

A FastAPI body parameter decodes the JSON into Python objects (``json.loads``), then has pydantic
walk those objects again, through the dependency machinery.  :func:`json_bytes` and
:func:`validated` hand the bytes to pydantic-core, which parses and validates them in one pass,
and refuse a bad body the way a body parameter does (the same ``RequestValidationError``
locations, so the same 400 ``INVALID_JSON`` and 422 ``INVALID_REQUEST`` answers).  A route using
them declares its body for ``/openapi.json`` with ``openapi_extra=body_schema(Model)``.
"""

from __future__ import annotations

import email.message
import json
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

REF_TEMPLATE = "#/components/schemas/{model}"

M = TypeVar("M", bound=BaseModel)


# The models routes declare with body_schema: install_schemas makes them components.
_BODY_MODELS: list[type[BaseModel]] = []


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the required JSON body, by reference to its
    component (which :func:`install_schemas` adds, as FastAPI would for a body parameter)."""
    if model not in _BODY_MODELS:
        _BODY_MODELS.append(model)
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}
            },
        }
    }


def install_schemas(app: FastAPI) -> None:
    """Add the models of :func:`body_schema` (and those they refer to) to the app's OpenAPI
    components, the first time ``/openapi.json`` is built."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = build()
        if fresh:
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in _BODY_MODELS:
                model_schema = model.model_json_schema(ref_template=REF_TEMPLATE)
                for name, definition in model_schema.pop("$defs", {}).items():
                    components.setdefault(name, definition)
                components.setdefault(model.__name__, model_schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _is_json(content_type: str | None) -> bool:
    # What FastAPI accepts as JSON: application/json, application/*+json, with any parameters.
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


async def json_bytes(request: Request) -> bytes:
    """The body's bytes, if it is there and said to be JSON."""
    raw = await request.body()
    if not raw:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    if not _is_json(request.headers.get("content-type")):
        raise RequestValidationError(
            [
                {
                    "type": "model_attributes_type",
                    "loc": ("body",),
                    "msg": "Input should be a JSON object sent as application/json",
                    "input": None,
                }
            ]
        )
    return raw


def validated(raw: bytes, model: type[M]) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        if not any(e["type"] == "json_invalid" for e in exc.errors(include_url=False)):
            raise RequestValidationError(_in_body(exc)) from None
    # pydantic-core's parser is stricter than Python's (a lone surrogate escape, NaN), where a body
    # parameter's json.loads takes the text and the message's own checks answer it: do the same.
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
        where = ("body", exc.pos) if isinstance(exc, json.JSONDecodeError) else ("body",)
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": where,
                    "msg": "JSON decode error",
                    "input": None,
                }
            ]
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(_in_body(exc)) from None


def _in_body(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"], "input": None}
        for e in exc.errors(include_url=False)
    ]
