"""``PushConsumer``: a consumer group member on threads and ``httpx.Client``.

One receiver thread long-polls the broker for at most ``batch_size`` messages (the prefetch: it
never holds more) and hands them to ``concurrency`` worker threads -- one message at a time in
concurrent mode, one queue's messages in order in orderly mode.  ``shutdown()`` stops receiving,
releases what no worker has started (its invisibility is cut so another member gets it at once),
lets the workers finish what they hold, and sends the pending batched acks.

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
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from framework import inbox, protocol
from framework.config import Retry
from framework.consumer_base import AckBuffer, AckMode, ConsumerBase, succeeded
from framework.errors import HalfMQError
from framework.message import Message
from framework.registry import Registered
from framework.transport import BrokerClient, Verify

log = logging.getLogger("halfmq.consumer")

RELEASE_SECONDS = 0.001
ONCE = Retry(attempts=1)


def lanes(messages: Sequence[Message], orderly: bool) -> list[list[Message]]:
    """Units of work: each message alone, or (orderly) each queue's messages in offset order."""
    if not orderly:
        return [[m] for m in messages]
    by_queue: dict[tuple[str, int | None], list[Message]] = {}
    for message in messages:
        by_queue.setdefault((message.topic, message.queue_id), []).append(message)
    return list(by_queue.values())


class PushConsumer(ConsumerBase):
    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        transport: httpx.BaseTransport | None = None,
        verify: Verify = True,
        **options: Any,
    ) -> None:
        super().__init__(group, brokers, **options)
        self.client = BrokerClient(
            self.brokers,
            timeout=self.timeout,
            retry=self.retry,
            transport=transport,
            verify=verify,
            credentials=self.credentials,
        )
        self._stop = threading.Event()
        self._work: queue.Queue[list[Message] | None] = queue.Queue()
        self._held = 0
        self._room = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._acks = AckBuffer(self.batch_ack)
        self._acks_lock = threading.Lock()

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the group and its subscriptions (same config again is fine), then consume."""
        if self.started:
            return
        self.require_subscriptions()
        self.client.call(
            protocol.create_group(
                self.group,
                message_model=self.message_model,
                consume_from=self.consume_from,
                orderly=self.orderly,
                max_reconsume_times=self.max_reconsume_times,
            )
        )
        for topic, expression in self.subscriptions():
            self.client.call(protocol.subscribe(self.group, topic, expression))
        self._stop.clear()
        self._spawn(self._receive_loop, "receive")
        for n in range(self.concurrency):
            self._spawn(self._work_loop, f"worker-{n}")
        if any(h.options.ack_mode is AckMode.BATCH for h in self.handlers):
            self._spawn(self._flush_loop, "acks")
        self.started = True

    def shutdown(self) -> None:
        """Stop receiving; release what was not started; finish what is held; flush acks."""
        if not self.started:
            self.client.close()
            return
        self._stop.set()
        receiver, *others = self._threads
        receiver.join(self.wait_seconds + self.timeout.read + 5)
        self._release_queued()
        for _ in range(self.concurrency):
            self._work.put(None)
        for thread in others:
            thread.join(self.shutdown_timeout)
        self._threads.clear()
        with self._acks_lock:
            handles = self._acks.take()
        self._send_acks(handles)
        self.client.close()
        self.started = False

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # -- acknowledgement (MANUAL mode calls these from the handler) -------------------------------

    def ack(self, message: Message) -> None:
        self._send_acks([self._handle(message)])

    def nack(self, message: Message, delay_level: int | None = None) -> str:
        """RECONSUME_LATER now; answers RETRY, RETRY_IN_PLACE (orderly) or DLQ."""
        return self.client.call(protocol.nack(self.group, self._handle(message), delay_level))

    def release(self, message: Message) -> None:
        """Give the message back at once, without counting a reconsume."""
        handle = self._handle(message)
        self.client.call(protocol.change_invisible(self.group, handle, RELEASE_SECONDS))

    @staticmethod
    def _handle(message: Message) -> str:
        if message.receipt_handle is None:
            raise HalfMQError("only a delivered message can be acked", msg_id=message.msg_id)
        return message.receipt_handle

    # -- the threads -----------------------------------------------------------------------------

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=f"halfmq-{name}-{self.group}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _receive_loop(self) -> None:
        while not self._stop.is_set():
            with self._room:
                while self._held > self.low_water and not self._stop.is_set():
                    self._room.wait(0.2)
                free = self.batch_size - self._held
            if self._stop.is_set():
                return
            call = protocol.receive(
                self.group, self.client_id, free, self.invisible_seconds, self.wait_seconds
            )
            try:
                messages = self.client.call(call, ONCE)
            except HalfMQError as exc:
                log.warning("receive failed: %s", exc)
                self._stop.wait(0.5)
                continue
            with self._room:
                self._held += len(messages)
            for lane in lanes(messages, self.orderly):
                self._work.put(lane)

    def _work_loop(self) -> None:
        while True:
            lane = self._work.get()
            if lane is None:
                return
            for n, message in enumerate(lane):
                if self._stop.is_set() and n > 0:
                    self._release(lane[n:])
                    break
                self._consume(message)
                self._done(1)

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
            self._give_back(message)
        self._done(len(messages))

    def _give_back(self, message: Message) -> None:
        try:
            self.release(message)
        except HalfMQError as exc:
            log.info("release of %s failed (it comes back later): %s", message.msg_id, exc)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.batch_ack.max_delay / 2):
            with self._acks_lock:
                handles = self._acks.due()
            self._send_acks(handles)

    # -- one message -----------------------------------------------------------------------------

    def _consume(self, message: Message) -> None:
        handler = self.handler_for(message)
        if handler is None:
            self._give_back(message)
            return
        ok, error = self._run(handler, message)
        if error is not None:
            log.warning("consuming %s failed: %r", message.msg_id, error)
        self._settle(handler.options.ack_mode, message, ok, error)

    def _run(self, handler: Registered[..., Any], message: Message) -> tuple[bool, Any]:
        options = handler.options
        try:
            if options.session_factory is None:
                return succeeded(handler.fn(message)), None
            key = options.dedup_key(message) if options.idempotent else None
            result = inbox.consume(options.session_factory, handler.fn, message, self.group, key)
            return result.ok, result.error
        except Exception as exc:
            return False, exc

    def _settle(self, mode: AckMode, message: Message, ok: bool, error: Any) -> None:
        handle = self._handle(message)
        try:
            if not ok:
                self.nack(message)
            elif mode is AckMode.BATCH:
                with self._acks_lock:
                    handles = self._acks.add(handle)
                self._send_acks(handles)
            elif mode is not AckMode.MANUAL:
                self._send_acks([handle])
        except HalfMQError as exc:  # the message comes again after its invisibility
            log.info("settling %s failed: %s", message.msg_id, exc)

    def _send_acks(self, handles: list[str]) -> None:
        if not handles:
            return
        try:
            result = self.client.call(protocol.ack(self.group, handles))
        except HalfMQError as exc:
            log.warning("ack of %d messages failed (they come again): %s", len(handles), exc)
            return
        if result.stale:
            log.info("%d stale acks: those messages come again", len(result.stale))
