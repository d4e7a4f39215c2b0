"""What every producer and consumer is: one member of a group, with its brokers, keys and client.

Both faces of a producer (and of a consumer) share one constructor, typed for the face's transport
(``TransactionProducer(transport=httpx.BaseTransport)``, ``AsyncTransactionProducer(
transport=httpx.AsyncBaseTransport)``); the face adds only :meth:`GroupMember._connect`: its client
and the state of its background work.  :class:`SyncFace` and :class:`AsyncFace` make a face's
``start`` / ``shutdown`` its ``with`` / ``async with``.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Generic, Self, TypeVar

from framework.batching import Linger
from framework.client_trace import ClientTrace, enabled
from framework.config import Retry, Timeout
from framework.errors import ConfigurationError
from framework.signing import CredentialsLike, resolve_credentials
from framework.transport import TransportT, Verify

C = TypeVar("C")

NAME = re.compile(r"^[A-Za-z0-9_-]{1,127}$")
ONCE = Retry(attempts=1)  # a long-poll is not retried: the loop polls again anyway


def check_name(name: str, what: str) -> str:
    if not NAME.match(name):
        raise ConfigurationError(f"{what} {name!r} must match {NAME.pattern}")
    return name


def default_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}#{uuid.uuid4().hex[:8]}"


class GroupMember(ABC, Generic[TransportT]):
    """A member of ``group``: its brokers, its client id, its keys, its call settings (time-outs,
    retries, and how its calls share requests) and its client-side trace
    (:mod:`framework.client_trace`)."""

    def __init__(
        self,
        group: str,
        what: str,
        brokers: Sequence[str],
        client_id: str | None,
        timeout: Timeout | None,
        retry: Retry | None,
        credentials: CredentialsLike,
        client_trace: bool | None = None,
        linger: Linger | None = None,
    ) -> None:
        """``linger``: how this member's calls share requests (:mod:`framework.batching`)."""
        self.group = check_name(group, what)
        # None: HALFMQ_ACCESS_KEY / HALFMQ_SECRET_KEY, read here (neither set: unsigned, no ACL)
        self.credentials = resolve_credentials(credentials)
        self.brokers = tuple(brokers)
        self.client_id = client_id or default_client_id()
        self.timeout = timeout or Timeout()
        self.retry = retry or Retry()
        # None: HALFMQ_CLIENT_TRACE, read here (unset: on); the face starts its reporter
        self.client_trace = ClientTrace(self.group, self.client_id, enabled(client_trace))
        self.linger = linger or Linger()
        self.started = False

    @abstractmethod
    def _connect(self, transport: TransportT | None, verify: Verify) -> None:
        """The face's part of the constructor: its client and the state of its background work."""

    def _client(self, kind: Callable[..., C], transport: TransportT | None, verify: Verify) -> C:
        """This member's client of ``kind`` (:class:`~framework.transport.BrokerClient` or
        :class:`~framework.transport.AsyncBrokerClient`)."""
        return kind(
            self.brokers,
            timeout=self.timeout,
            retry=self.retry,
            transport=transport,
            credentials=self.credentials,
            verify=verify,
            linger=self.linger,
        )


class SyncFace(ABC):
    """``with member:`` starts it and shuts it down at exit."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


class AsyncFace(ABC):
    """``async with member:`` starts it and shuts it down at exit."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def shutdown(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()
