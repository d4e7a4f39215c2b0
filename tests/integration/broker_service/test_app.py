"""The app factory: a broker process tunes the garbage collector; the OpenAPI schema it serves."""

from __future__ import annotations

import gc

from broker_service.app import SERVER_GC_THRESHOLD, build_app
from broker_service.settings import BrokerSettings
from tests.support import BrokerApp


async def test_a_broker_process_freezes_its_start_up_heap_and_a_plain_app_does_not(
    sqlite_url: str,
) -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        plain = build_app(BrokerSettings(database_url=sqlite_url, scheduler=False))
        async with plain.router.lifespan_context(plain):
            assert gc.get_freeze_count() == 0
            assert gc.get_threshold() == threshold
        served = build_app(BrokerSettings(database_url=sqlite_url, scheduler=False), server_gc=True)
        async with served.router.lifespan_context(served):
            # Everything alive at start-up (modules, routes, models) is out of the collector's
            # reach; what requests make later is collected as before.
            assert gc.get_freeze_count() > 10_000
            assert gc.get_threshold()[0] == SERVER_GC_THRESHOLD
            garbage: list[object] = []
            garbage.append(garbage)  # a cycle made after start-up
            del garbage
            assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


async def test_the_batch_body_is_a_named_component_of_the_openapi_schema(
    broker: BrokerApp,
) -> None:
    """The batch route parses its own body (api/schemas/bodies.py) and still declares it as FastAPI
    declares a body parameter: a reference to a component, whose references resolve."""
    schema = (await broker.client.get("/openapi.json")).json()
    body = schema["paths"]["/v1/topics/{topic}/messages:batch"]["post"]["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/BatchIn"}
    components = schema["components"]["schemas"]
    messages = components["BatchIn"]["properties"]["messages"]
    assert (messages["minItems"], messages["maxItems"]) == (1, 1000)
    assert messages["items"] == {"$ref": "#/components/schemas/MessageIn"}
    assert "body" in components["MessageIn"]["properties"]
