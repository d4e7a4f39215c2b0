"""Decision flows written once, without I/O, and driven by both faces (httpx's auth flow, widened).

A flow is a generator.  It yields the steps it needs -- a :class:`~framework.protocol.Call` to
make, or an :class:`Invoke` of a user's callback or database unit of work -- and receives each
step's result through ``send()``, or the exception the step raised through ``throw()``.  What it
returns is the flow's result.  A flow never touches the network, a thread or an event loop: the
sync client (:meth:`framework.transport.BrokerClient.run`) takes its steps in the calling thread,
the asyncio client (:meth:`framework.transport.AsyncBrokerClient.run`) awaits them::

    def commit_at_once(group: str, message: Message) -> Flow[str]:
        receipt = yield from call(protocol.prepare(message, group))
        return (yield from call(protocol.end(receipt.transaction_id, group, True, from_check=False)))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from framework.protocol import Call

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Invoke:
    """Run ``fn(*args)``; the flow receives what it returns, or has what it raises thrown in.

    The sync face calls ``fn``.  The asyncio face awaits ``aio(*args)`` when it is given (the
    version for an ``async_sessionmaker``), awaits ``fn`` when it is a coroutine function, and runs
    any other ``fn`` in a worker thread, so the event loop never blocks."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    aio: Callable[..., Awaitable[Any]] | None = None


Step: TypeAlias = Call[Any] | Invoke
Flow: TypeAlias = Generator[Step, Any, T]


def call(request: Call[T]) -> Flow[T]:
    """One call, its answer typed: ``receipt = yield from call(protocol.prepare(...))``."""
    answer: T = yield request
    return answer


class Steps(Generic[T]):
    """A flow as a driver walks it: iterate for the steps; before the next one, set ``reply`` to
    what the step returned or ``error`` to what it raised (thrown into the flow).  Once the
    iteration ends, ``result`` is what the flow returned; an error the flow does not catch ends the
    iteration by raising."""

    result: T

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self.reply: Any = None
        self.error: Exception | None = None

    def __iter__(self) -> Steps[T]:
        return self

    def __next__(self) -> Step:
        reply, error = self.reply, self.error
        self.reply = self.error = None
        try:
            if error is not None:
                return self._flow.throw(error)
            return self._flow.send(reply)
        except StopIteration as done:
            self.result = done.value
            raise StopIteration from None
