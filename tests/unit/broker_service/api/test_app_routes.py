"""The app's route table: the routers' routes added flat, hottest first (broker_service/api/app.py).
Flat, the OpenAPI document is the one ``include_router`` gives, and the order cannot change which
route answers a request, as no two routes match the same method and path."""

from __future__ import annotations

import re
from itertools import combinations

from fastapi import FastAPI
from fastapi.routing import APIRoute

from broker_service.api.app import ROUTERS, add_routes

PARAM = re.compile(r"^\{[^}]+\}$")


def _overlap(one: str, other: str) -> bool:
    """Whether some path matches both templates: segment by segment, a ``{param}`` matches any
    non-empty segment (Starlette's default ``[^/]+``), a literal only itself."""
    a, b = one.split("/"), other.split("/")
    if len(a) != len(b):
        return False
    return all(x == y or PARAM.match(x) or PARAM.match(y) for x, y in zip(a, b, strict=True))


def test_flat_routes_give_the_openapi_document_of_included_routers() -> None:
    included = FastAPI(title="t", version="1")
    for router in ROUTERS:
        included.include_router(router)
    flat = FastAPI(title="t", version="1")
    add_routes(flat, ROUTERS)
    assert flat.openapi() == included.openapi()
    assert len(flat.openapi()["paths"]) > 40


def test_no_two_routes_answer_the_same_method_and_path() -> None:
    routes = [
        (route.path, set(route.methods or ()))
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
    ]
    clashes = [
        (one, other, sorted(one_methods & other_methods))
        for (one, one_methods), (other, other_methods) in combinations(routes, 2)
        if one_methods & other_methods and _overlap(one, other)
    ]
    assert clashes == []


def test_the_overlap_check_sees_an_overlap() -> None:
    assert _overlap("/v1/transactions/{transaction_id}", "/v1/transactions/decisions:batch")
    assert not _overlap("/v1/topics/{topic}", "/v1/topics/{topic}/messages")
    assert not _overlap("/v1/transactions/{id}/commit", "/v1/transactions/{id}/rollback")
