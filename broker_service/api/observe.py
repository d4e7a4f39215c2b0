"""Request latency: ``halfmq_request_seconds{method, route, status_class}``.

A pure ASGI middleware, the outermost one, so that it times what a client waits for: the limits
and the ACL gate as well as the route (BaseHTTPMiddleware would add a task and a stream to every
request of the hot send path).  Labels stay bounded whatever clients send:

* ``route`` is the path template of the route that served the request (what the router left in
  ``scope["route"]``).  A request refused before the router (the ACL gate, the limits) is matched
  against the templates of the app's routes, handed in by ``api/app.py``; a path no route serves
  is ``unmatched``.
* ``method`` is one of the HTTP methods a route may have, any other is ``other``.

Per request it costs a closure around ``send``, a clock read either side and one dict lookup
before the histogram's own ``observe`` (the child of each label set is kept).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from prometheus_client import Histogram
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker_service.api.permissions import OPS_ROUTES

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RouteTemplates:
    """The template a path falls under, for requests that never reached the router."""

    def __init__(self, templates: Iterable[str]) -> None:
        self.static: set[str] = set()
        self.patterns: list[tuple[re.Pattern[str], str]] = []
        for template in sorted(set(templates)):
            if "{" in template:
                self.patterns.append((compile_path(template)[0], template))
            else:
                self.static.add(template)

    def match(self, path: str) -> str:
        if path in self.static:
            return path
        for pattern, template in self.patterns:
            if pattern.match(path):
                return template
        return UNMATCHED


def known_routes() -> RouteTemplates:
    return RouteTemplates(list(OPS_ROUTES))


class RequestTimer:
    def __init__(
        self, app: ASGIApp, *, histogram: Histogram, templates: RouteTemplates | None = None
    ) -> None:
        self.app = app
        self.histogram = histogram
        self.templates = templates or known_routes()
        self._observers: dict[tuple[str, str, int], Callable[[float], None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what the server answers when the app raised before its response

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self._observe(scope, status, time.perf_counter() - began)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or self.templates.match(scope["path"])
        method = scope["method"]
        if method not in METHODS:
            method = "other"
        key = (method, template, status // 100)
        observe = self._observers.get(key)
        if observe is None:
            observe = self.histogram.labels(method, template, f"{status // 100}xx").observe
            self._observers[key] = observe
        observe(seconds)
