"""Handlers registered by decorators, per topic (``"*"``: any topic), on one client object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from framework.errors import ConfigurationError

P = ParamSpec("P")
R = TypeVar("R")
ANY_TOPIC = "*"


@dataclass(frozen=True, slots=True)
class Registered(Generic[P, R]):
    """What a decorator returns: the handler, still callable, and where it was registered."""

    fn: Callable[P, R]
    topic: str
    role: str
    options: Any = None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)


class Handlers:
    """One role's handlers (executors, checkers, consumers) by topic."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._by_topic: dict[str, Registered[..., Any]] = {}

    def add(self, handler: Registered[..., Any]) -> None:
        if handler.topic in self._by_topic:
            raise ConfigurationError(
                f"a {self.role} is already registered for topic {handler.topic!r}",
                topic=handler.topic,
            )
        self._by_topic[handler.topic] = handler

    def find(self, topic: str) -> Registered[..., Any] | None:
        return self._by_topic.get(topic) or self._by_topic.get(ANY_TOPIC)

    def topics(self) -> list[str]:
        return sorted(t for t in self._by_topic if t != ANY_TOPIC)

    def __iter__(self) -> Any:
        return iter(self._by_topic.values())
