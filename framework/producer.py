"""``TransactionProducer``: RocketMQ's TransactionMQProducer on threads and ``httpx.Client``.

The face runs the producer's flows (:mod:`framework.producer_base`) with
:meth:`BrokerClient.run <framework.transport.BrokerClient.run>` and keeps its background work on
threads: heartbeats, and in pull mode a long-poll for checks answered on a small pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from framework import protocol
from framework.client_trace import ThreadReporter
from framework.errors import HalfMQError
from framework.member import ONCE, SyncFace
from framework.message import LocalTransactionState, Message, SendResult, TransactionSendResult
from framework.oneway import ThreadOneWay
from framework.producer_base import ProducerBase
from framework.transport import BrokerClient, Verify

log = logging.getLogger("halfmq.producer")


class TransactionProducer(ProducerBase[httpx.BaseTransport], SyncFace):
    """Sends plain and transactional messages for one producer group and answers its checks.

    ::

        producer = TransactionProducer("bob-bank", brokers=["http://127.0.0.1:9876"])

        @producer.execute_local_transaction("transfers")
        def debit(message: Message, arg) -> LocalTransactionState: ...

        @producer.check_local_transaction("transfers")
        def was_debited(message: Message) -> LocalTransactionState: ...

        with producer:                      # start(): heartbeats and check-back; shutdown() at exit
            producer.send_message_in_transaction(Message("transfers", body="..."), arg=...)
    """

    oneway_sender: ThreadOneWay

    def _connect(self, transport: httpx.BaseTransport | None, verify: Verify) -> None:
        self.client = self._client(BrokerClient, transport, verify)
        self.reporter = ThreadReporter(self.client_trace, self.client)
        self.oneway_sender = ThreadOneWay(self.client, self.group)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None
        self._server: Any = None

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Heartbeat once (so the broker knows this instance), then keep heartbeating and, in pull
        mode, long-poll for checks in the background."""
        if self.started:
            return
        self.require_callback()
        self._stop.clear()
        if self.check_mode.kind != "none":
            self.heartbeat()
            self._spawn(self._heartbeat_loop, "heartbeat")
        if self.check_mode.kind == "pull":
            self._pool = ThreadPoolExecutor(self.check_mode.workers, f"halfmq-check-{self.group}")
            self._spawn(self._pull_loop, "pull")
        self.started = True

    def shutdown(self) -> None:
        """Stop the background work, finish the one-way sends (at most one request's time-outs:
        the rest are dropped), report the client trace, then close the client.  A pull of checks
        in flight is not waited for (see :meth:`_pull_loop`)."""
        self._stop.set()
        self.oneway_sender.close(self.client.close_wait)
        for thread in self._threads:
            if thread.name != self._pull_thread_name:
                thread.join(self.timeout.read + 5)  # a heartbeat in flight: one short call
        self._threads.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.reporter.close()
        self.client.close()
        self.started = False

    def serve_checks(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Push mode without a web framework: a small built-in HTTP server answers the broker's
        checks (with credentials: only those the broker signed with them).  Returns (and
        heartbeats with) its callback URL."""
        from framework.checkserver import start_thread_server

        self._server, self.callback_url = start_thread_server(
            self.answer_check, host, port, credentials=self.credentials
        )
        return self.callback_url

    # -- sending ---------------------------------------------------------------------------------

    def send(self, message: Message) -> SendResult:
        """A plain, ordered (``sharding_key``) or delayed (``delay_level``/``deliver_at``) send."""
        return self.client.run(self.send_flow(message))

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Messages of one topic, stored all or none, in order."""
        return self.client.run(self.send_batch_flow(messages))

    def send_oneway(self, message: Message) -> None:
        """Send without waiting for the broker (RocketMQ's sendOneway): returns at once and
        never raises for the broker's refusal or absence -- the one send whose loss is accepted.
        What became of it is counted in ``producer.oneway``.  Raises
        :class:`~framework.errors.OneWayInTransactionError` inside a local transaction."""
        self.oneway_sender.submit(self.oneway_job(message))

    def create_topic(self, name: str, queues: int | None = None, order: bool = False) -> None:
        self.client.call(protocol.create_topic(name, queues, order))

    def send_message_in_transaction(
        self, message: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Half first; the local transaction only once the half is stored; then commit, roll back
        or (UNKNOW) leave it to the check-back.  Raises only when the half could not be stored."""
        return self.client.run(self.send_in_transaction_flow(message, arg))

    def end(self, transaction_id: str, state: LocalTransactionState, *, from_check: bool) -> str:
        return self.client.call(self.end_call(transaction_id, state, from_check=from_check))

    def transaction(self, transaction_id: str) -> dict[str, Any]:
        """The broker's view of a transaction (state, check_times, resolved_by...)."""
        return self.client.call(protocol.get_transaction(transaction_id))

    # -- check-back ------------------------------------------------------------------------------

    def answer_check(self, message: Message) -> LocalTransactionState:
        """What this instance answers to a check (never raises: a failure is UNKNOW)."""
        return self.client.run(self.check_flow(message))

    def heartbeat(self) -> None:
        self.client.call(self.heartbeat_call())

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=f"halfmq-{name}-{self.group}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                self.heartbeat()
            except HalfMQError as exc:
                log.warning("heartbeat of %s failed: %s", self.client_id, exc)

    @property
    def _pull_thread_name(self) -> str:
        return f"halfmq-pull-{self.group}"

    def _pull_loop(self) -> None:
        """Long-poll for checks while running.  ``shutdown()`` does not wait for a pull in
        flight: the client stays open until it ends (:meth:`BrokerClient.polling`), and checks
        it brings after the stop are left unanswered -- the broker checks them again an
        interval later."""
        pull, pause = self.pull_call(), min(1.0, self.check_mode.pull_wait_seconds)
        while not self._stop.is_set():
            with self.client.polling():
                try:
                    checks = self.client.call(pull, ONCE)
                except HalfMQError as exc:
                    if not self._stop.is_set():
                        log.warning("pulling checks failed: %s", exc)
                    self._stop.wait(pause)
                    continue
            pool = self._pool
            if pool is None:  # shut down meanwhile
                return
            try:
                for check in checks:
                    pool.submit(self.client.run, self.pulled_check_flow(check))
            except RuntimeError:  # shut down meanwhile: the pool takes no more
                return
