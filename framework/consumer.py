"""``PushConsumer``: a consumer group member on threads and ``httpx.Client``.

One receiver thread long-polls the broker for at most ``batch_size`` messages (the prefetch: it
never holds more) and hands them to ``concurrency`` worker threads -- one message at a time in
concurrent mode, one queue's messages in order in orderly mode.  Each message is answered by the
consumer's flow (:meth:`~framework.consumer_base.ConsumerBase.consume_flow`), run with
:meth:`BrokerClient.run <framework.transport.BrokerClient.run>`.  ``shutdown()`` stops receiving,
releases what no worker has started (its invisibility is cut so another member gets it at once),
lets the workers finish what they hold, and sends the pending batched acks.  It does not wait out
a long poll in flight: the receiver is left to end it and gives back whatever that poll brings
(at least once: a message the broker handed to a poll that nobody reads any more -- the process
exited -- comes again after ``invisible_seconds``).

::

    consumer = PushConsumer("smith-bank", brokers=["http://127.0.0.1:9876"])

    @consumer.subscribe("transfers", tags="*")
    def credit(message: Message) -> ConsumeResult: ...

    consumer.start()
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

from framework.client_trace import ThreadReporter
from framework.consumer_base import ConsumerBase
from framework.errors import HalfMQError
from framework.member import ONCE, SyncFace
from framework.message import Message
from framework.transport import BrokerClient, Verify

log = logging.getLogger("halfmq.consumer")


class PushConsumer(ConsumerBase[httpx.BaseTransport], SyncFace):
    def _connect(self, transport: httpx.BaseTransport | None, verify: Verify) -> None:
        self.client = self._client(BrokerClient, transport, verify)
        self.reporter = ThreadReporter(self.client_trace, self.client)
        self._stop = threading.Event()
        self._work: queue.Queue[list[Message] | None] = queue.Queue()
        self._held = 0
        self._room = threading.Condition()
        self._threads: list[threading.Thread] = []

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the group and its subscriptions (same config again is fine), then consume."""
        if self.started:
            return
        self.client.run(self.register_flow())
        self._stop.clear()
        self._spawn(self._receive_loop, "receive")
        for n in range(self.concurrency):
            self._spawn(self._work_loop, f"worker-{n}")
        if self.batching:
            self._spawn(self._flush_loop, "acks")
        self.started = True

    def shutdown(self) -> None:
        """Stop receiving; release what was not started; finish what is held; flush acks and
        the client trace."""
        if not self.started:
            self.reporter.close()
            self.client.close()
            return
        with self._room:  # under the lock: the receiver enqueues nothing from now on
            self._stop.set()
            self._room.notify_all()
        _, *others = self._threads  # the receiver is not waited for (see _receive_loop)
        self._release_queued()
        for _ in range(self.concurrency):
            self._work.put(None)
        for thread in others:
            thread.join(self.shutdown_timeout)
        self._threads.clear()
        self.client.run(self.acks_flow([*self.riders.take(), *self.acks.take()]))
        self.reporter.close()
        self.client.close()
        self.started = False

    # -- acknowledgement (MANUAL and CLIENT modes call these from the handler) --------------------

    def ack(self, message: Message) -> None:
        """Ack ``message`` (MANUAL); in CLIENT mode, also every earlier unsettled message of its
        queue this consumer handed to a handler -- in one request."""
        self.client.run(self.acks_flow(self.ack_handles(message)))

    def nack(self, message: Message, delay_level: int | None = None) -> str:
        """RECONSUME_LATER now; answers RETRY, RETRY_IN_PLACE (orderly) or DLQ."""
        self.unsettled.settled([message])
        return self.client.call(self.nack_call(message, delay_level))

    def release(self, message: Message) -> None:
        """Give the message back at once, without counting a reconsume."""
        self.unsettled.settled([message])
        self.client.call(self.release_call(message))

    # -- the threads -----------------------------------------------------------------------------

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=f"halfmq-{name}-{self.group}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _receive_loop(self) -> None:
        """Long-poll while running.  ``shutdown()`` does not wait for a poll in flight: the
        client stays open until the poll ends (:meth:`BrokerClient.polling`), and what it brings
        after the stop is given back at once."""
        while self._room_to_receive():
            with self.client.polling():
                carried = self._riders()
                with self._room:
                    free = None if self._stop.is_set() else self.batch_size - self._held
                if free is None:
                    self.client.run(self.acks_flow(carried))
                    return
                try:
                    messages = self._receive(carried, free)
                except HalfMQError as exc:
                    if not self._stop.is_set():
                        log.warning("receive failed: %s", exc)
                    self._stop.wait(0.5)
                    continue
                with self._room:
                    if not self._stop.is_set():
                        self._held += len(messages)
                        for lane in self.lanes(messages):
                            self._work.put(lane)
                        continue
                for message in messages:
                    self.client.run(self.give_back_flow(message))

    def _riders(self) -> list[str]:
        """While messages received are still being handled, wait for them a little (at most
        the linger), taking their acks along."""
        if not self.riding:
            return []
        with self._room:
            deadline = time.monotonic() + self.linger.seconds
            while self._held > 0 and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._room.wait(left)
        return self.riders.take()

    def _receive(self, handles: list[str], free: int) -> list[Message]:
        """A receive of up to ``free`` messages, carrying the acks of ``handles`` (sent alone, as
        ever, when the ack-and-receive fails)."""
        if not handles:
            return self.client.call(self.receive_call(free), ONCE)
        try:
            _, messages = self.client.call(self.ack_and_receive_call(handles, free), ONCE)
        except HalfMQError as exc:
            self.riders_failed(exc)
            self.client.run(self.acks_flow(handles))
            raise
        return messages

    def _room_to_receive(self) -> bool:
        """Wait until the prefetch runs low: False once stopping.  Meanwhile the handlers' acks
        ride on the next receive (:class:`~framework.acks.AckRiders`); those that waited the
        linger without one going (slow handlers: the prefetch drains slowly) are sent alone."""
        if self.riding:
            self.riders.open()
        while True:
            with self._room:
                while self._held > self.low_water and not self._stop.is_set():
                    if not self.riders.pending:
                        self._room.wait(0.2)
                    elif not self._room.wait(self.linger.seconds):
                        break
                else:
                    return not self._stop.is_set()
                late = self.riders.take()
            with self.client.polling():
                self.client.run(self.acks_flow(late))
            self.riders.open()

    def _work_loop(self) -> None:
        while (lane := self._work.get()) is not None:
            units = self.units(lane)
            for n, unit in enumerate(units):
                if self._stop.is_set() and n > 0:
                    self._release([m for rest in units[n:] for m in rest])
                    break
                self.client.run(self.unit_flow(unit))
                self._done(len(unit))

    def _done(self, count: int) -> None:
        with self._room:
            self._held -= count
            self._room.notify()

    def _release_queued(self) -> None:
        while True:
            try:
                lane = self._work.get_nowait()
            except queue.Empty:
                return
            if lane is not None:
                self._release(lane)

    def _release(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.client.run(self.give_back_flow(message))
        self._done(len(messages))

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.batch_ack.max_delay / 2):
            self.client.run(self.acks_flow(self.acks.due()))
