"""JSON's types hold in every request body: a number field refuses true and "2", a boolean field
refuses 1 and "true".  pydantic's lax mode takes them, and the fuzz test once found
``{"max_reconsume_times": false}`` creating a group with 0 retries.  The walk covers every body
model the broker's routes read, so a field added later cannot slip through."""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from broker_service.api import schemas
from broker_service.api.schemas.common import Strict
from tests.integration.broker_service.api.test_errors import assert_error, post_json
from tests.support import BrokerApp

WRONG: dict[str, list[Any]] = {
    "integer": [True, False, "2", 2.5],
    "number": [True, "2.5"],
    "boolean": [1, 0, "true"],
}


def _bodies() -> list[type[BaseModel]]:
    """Every request body model: the Strict subclasses in every module of the schemas package."""
    for module in pkgutil.iter_modules(schemas.__path__):
        importlib.import_module(f"{schemas.__name__}.{module.name}")
    found: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [Strict]
    while pending:
        model = pending.pop()
        found.append(model)
        pending.extend(model.__subclasses__())
    return [model for model in found if model is not Strict]


def _scalar_type(schema: dict[str, Any]) -> str | None:
    """The JSON type a property takes, for a plain or nullable integer, number or boolean."""
    branches = schema.get("anyOf", [schema])
    types = {branch.get("type") for branch in branches} - {"null"}
    kind = types.pop() if len(types) == 1 else None
    return str(kind) if kind in WRONG and "format" not in schema else None


def _typed_fields() -> list[tuple[type[BaseModel], str, str]]:
    fields = []
    for model in _bodies():
        properties = model.model_json_schema()["properties"]
        for name, schema in properties.items():
            if kind := _scalar_type(schema):
                fields.append((model, name, kind))
    return fields


FIELDS = _typed_fields()


def test_the_walk_finds_the_fields_the_fuzz_test_found() -> None:
    names = {(model.__name__, name) for model, name, _ in FIELDS}
    assert ("GroupIn", "max_reconsume_times") in names
    assert ("GroupIn", "orderly") in names
    assert ("ReceiveIn", "wait_seconds") in names
    assert ("AccountIn", "admin") in names
    assert len(names) >= 12, sorted(names)


@pytest.mark.parametrize(
    ("model", "name", "kind"), FIELDS, ids=[f"{m.__name__}.{n}" for m, n, _ in FIELDS]
)
def test_a_wrongly_typed_value_is_refused(model: type[BaseModel], name: str, kind: str) -> None:
    if kind == "integer":  # JSON Schema's integer: 2.0 is 2 (whatever else the body lacks)
        errors = _errors_at(model, name, 2.0)
        assert not any(error["type"] == "int_from_float" for error in errors), errors
    for value in WRONG[kind]:
        with pytest.raises(ValidationError) as refused:
            model.model_validate({name: value})
        assert any(error["loc"][:1] == (name,) for error in refused.value.errors()), (
            value,
            refused.value.errors(),
        )


async def test_a_boolean_for_a_group_s_retries_is_422_and_creates_nothing(
    broker: BrokerApp,
) -> None:
    raw = json.dumps({"name": "g1", "max_reconsume_times": False, "orderly": True})
    detail = assert_error(
        await post_json(broker, "/v1/consumer-groups", raw), 422, "INVALID_REQUEST"
    )
    assert any("max_reconsume_times" in error["loc"] for error in detail["errors"]), detail
    raw = json.dumps({"name": "g1", "orderly": 1})
    assert_error(await post_json(broker, "/v1/consumer-groups", raw), 422, "INVALID_REQUEST")
    assert (await broker.client.get("/v1/consumer-groups/g1")).status_code == 404
    raw = json.dumps({"name": "g1", "max_reconsume_times": 3, "orderly": True})
    created = await post_json(broker, "/v1/consumer-groups", raw)
    assert created.status_code == 201, created.text
    assert created.json()["max_reconsume_times"] == 3


def _errors_at(model: type[BaseModel], name: str, value: Any) -> list[Any]:
    try:
        model.model_validate({name: value})
    except ValidationError as refused:
        return [error for error in refused.errors() if error["loc"][:1] == (name,)]
    return []
