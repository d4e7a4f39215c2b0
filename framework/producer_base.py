"""What the sync and async transaction producers share: configuration, the decorators that
register handlers on the producer, and the rules that turn a handler's outcome into a state."""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from framework.config import CheckMode, Retry, Timeout
from framework.errors import ConfigurationError
from framework.message import LocalTransactionState, Message
from framework.registry import ANY_TOPIC, Handlers, Registered
from framework.signing import CredentialsLike, resolve_credentials

log = logging.getLogger("halfmq.producer")

P = ParamSpec("P")
R = TypeVar("R")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,127}$")

PLAIN, TRANSACTIONAL = "plain", "transactional"


def check_name(name: str, what: str) -> str:
    if not NAME.match(name):
        raise ConfigurationError(f"{what} {name!r} must match {NAME.pattern}")
    return name


def default_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}#{uuid.uuid4().hex[:8]}"


def to_state(value: object, message: Message) -> LocalTransactionState:
    """``None`` (or anything that is not a state) is UNKNOW: the half waits for a check."""
    if isinstance(value, LocalTransactionState):
        return value
    if value is not None:
        log.warning(
            "handler for %s returned %r, not a LocalTransactionState: treated as UNKNOW",
            message.topic,
            value,
        )
    return LocalTransactionState.UNKNOW


class ProducerBase:
    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        client_id: str | None = None,
        check: CheckMode | None = None,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
        heartbeat_interval: float = 30.0,
        check_immunity_seconds: float | None = None,
        credentials: CredentialsLike = None,
    ) -> None:
        self.group = check_name(group, "producer group")
        # None: HALFMQ_ACCESS_KEY / HALFMQ_SECRET_KEY, read here (neither set: unsigned, no ACL)
        self.credentials = resolve_credentials(credentials)
        self.brokers = tuple(brokers)
        self.client_id = client_id or default_client_id()
        self.check_mode = check or CheckMode.pull()
        self.timeout = timeout or Timeout()
        self.retry = retry or Retry()
        self.heartbeat_interval = heartbeat_interval
        self.check_immunity_seconds = check_immunity_seconds
        self.callback_url = self.check_mode.callback_url
        self.executors = Handlers("local transaction")
        self.checkers = Handlers("check")
        self.started = False

    # -- decorators ------------------------------------------------------------------------------

    @overload
    def execute_local_transaction(self, topic: Callable[P, R], /) -> Registered[P, R]: ...
    @overload
    def execute_local_transaction(
        self, topic: str = ANY_TOPIC, /
    ) -> Callable[[Callable[P, R]], Registered[P, R]]: ...
    def execute_local_transaction(self, topic: Any = ANY_TOPIC, /) -> Any:
        """Register ``fn(message, arg) -> LocalTransactionState`` as the local transaction of
        ``topic`` (all topics when used bare).  Runs only after the half is stored; an exception
        or ``None`` means UNKNOW."""
        return _decorate(self.executors, topic, PLAIN)

    @overload
    def check_local_transaction(self, topic: Callable[P, R], /) -> Registered[P, R]: ...
    @overload
    def check_local_transaction(
        self, topic: str = ANY_TOPIC, /
    ) -> Callable[[Callable[P, R]], Registered[P, R]]: ...
    def check_local_transaction(self, topic: Any = ANY_TOPIC, /) -> Any:
        """Register ``fn(message) -> LocalTransactionState`` to answer the broker's checks."""
        return _decorate(self.checkers, topic, PLAIN)

    def transactional(
        self, topic: str = ANY_TOPIC, *, session_factory: Callable[[], Any]
    ) -> Callable[[Callable[P, R]], Registered[P, R]]:
        """Automatic check mode: ``fn(session, message, arg)`` runs inside a transaction of
        ``session_factory()`` that also writes the framework's log row; checks are answered from
        the log, with no check code.  Return ``ROLLBACK_MESSAGE`` or raise to roll back; the
        transaction commits otherwise."""

        def register(fn: Callable[P, R]) -> Registered[P, R]:
            handler = Registered(fn, topic, TRANSACTIONAL, session_factory)
            self.executors.add(handler)
            self.checkers.add(handler)
            return handler

        return register

    # -- shared rules ----------------------------------------------------------------------------

    def executor_for(self, message: Message) -> Registered[..., Any]:
        handler = self.executors.find(message.topic)
        if handler is None:
            raise ConfigurationError(
                f"no local transaction is registered for topic {message.topic!r}: decorate one "
                "with @producer.execute_local_transaction or @producer.transactional",
                topic=message.topic,
            )
        return handler

    def topics(self) -> list[str]:
        return sorted(set(self.executors.topics()) | set(self.checkers.topics()))

    def require_callback(self) -> None:
        if self.check_mode.kind == "push" and not self.callback_url:
            raise ConfigurationError(
                "push check mode needs a callback_url (CheckMode.push(url)) or the built-in "
                "server (producer.serve_checks()) before start()"
            )


def batch_topic(messages: Sequence[Message]) -> str:
    if not messages:
        raise ConfigurationError("a batch needs at least one message")
    return messages[0].topic


def _decorate(handlers: Handlers, topic: Any, role: str) -> Any:
    if callable(topic):
        handler = Registered(topic, ANY_TOPIC, role)
        handlers.add(handler)
        return handler

    def register(fn: Callable[P, R]) -> Registered[P, R]:
        registered = Registered(fn, topic, role)
        handlers.add(registered)
        return registered

    return register
