"""``TransactionProducer``: RocketMQ's TransactionMQProducer on threads and ``httpx.Client``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import httpx

from framework import protocol, txlog
from framework.config import CheckMode, Retry, Timeout
from framework.errors import HalfMQError
from framework.message import (
    LocalTransactionState,
    Message,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from framework.producer_base import TRANSACTIONAL, ProducerBase, batch_topic, to_state
from framework.signing import CredentialsLike
from framework.transport import BrokerClient, Verify

log = logging.getLogger("halfmq.producer")
State = LocalTransactionState


class TransactionProducer(ProducerBase):
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
        transport: httpx.BaseTransport | None = None,
        credentials: CredentialsLike = None,
        verify: Verify = True,
    ) -> None:
        super().__init__(
            group,
            brokers,
            client_id=client_id,
            check=check,
            timeout=timeout,
            retry=retry,
            heartbeat_interval=heartbeat_interval,
            check_immunity_seconds=check_immunity_seconds,
            credentials=credentials,
        )
        self.client = BrokerClient(
            self.brokers,
            timeout=self.timeout,
            retry=self.retry,
            transport=transport,
            verify=verify,
            credentials=self.credentials,
        )
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
        """Stop the background work (a long-poll ends within its wait), then close the client."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.check_mode.pull_wait_seconds + self.timeout.read + 5)
        self._threads.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.client.close()
        self.started = False

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

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
        return self.client.call(protocol.send(message))

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Messages of one topic, stored all or none, in order."""
        return self.client.call(protocol.send_batch(batch_topic(messages), messages))

    def create_topic(self, name: str, queues: int | None = None, order: bool = False) -> None:
        self.client.call(protocol.create_topic(name, queues, order))

    def send_message_in_transaction(
        self, message: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Half first; the local transaction only once the half is stored; then commit, roll back
        or (UNKNOW) leave it to the check-back.  Raises only when the half could not be stored."""
        executor = self.executor_for(message)
        receipt = self.client.call(
            protocol.prepare(message, self.group, self.check_immunity_seconds)
        )
        message = message.evolve(transaction_id=receipt.transaction_id)
        if executor.role == TRANSACTIONAL:
            state, error = txlog.run_local(executor.options, executor.fn, message, arg, self.group)
        else:
            try:
                state, error = to_state(executor.fn(message, arg), message), None
            except Exception as exc:
                log.warning("local transaction of %s raised: UNKNOW", receipt.transaction_id)
                state, error = State.UNKNOW, exc
        resolution = None
        if state is not State.UNKNOW:
            try:
                resolution = self.end(receipt.transaction_id, state, from_check=False)
            except HalfMQError as exc:  # the check-back resolves it
                log.warning("end of %s failed: %s", receipt.transaction_id, exc)
                error = error or exc
        return TransactionSendResult(
            SendStatus.SEND_OK,
            receipt.transaction_id,
            receipt.msg_id,
            state,
            message,
            resolution,
            error,
        )

    def end(self, transaction_id: str, state: LocalTransactionState, *, from_check: bool) -> str:
        commit = state is State.COMMIT_MESSAGE
        return self.client.call(
            protocol.end(transaction_id, self.group, commit, from_check=from_check)
        )

    def transaction(self, transaction_id: str) -> dict[str, Any]:
        """The broker's view of a transaction (state, check_times, resolved_by...)."""
        return self.client.call(protocol.get_transaction(transaction_id))

    # -- check-back ------------------------------------------------------------------------------

    def answer_check(self, message: Message) -> LocalTransactionState:
        """What this instance answers to a check (never raises: a failure is UNKNOW)."""
        handler = self.checkers.find(message.topic)
        if handler is None:
            log.warning("no check handler for topic %s: UNKNOW", message.topic)
            return State.UNKNOW
        try:
            if handler.role == TRANSACTIONAL:
                return txlog.check(handler.options, message, self.group)
            return to_state(handler.fn(message), message)
        except Exception:
            log.exception("check of %s failed: UNKNOW", message.transaction_id)
            return State.UNKNOW

    def heartbeat(self) -> None:
        self.client.call(
            protocol.heartbeat(self.group, self.client_id, self.callback_url, self.topics())
        )

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

    def _pull_loop(self) -> None:
        mode = self.check_mode
        call = protocol.pull_checks(
            self.group, self.client_id, mode.pull_max, mode.pull_wait_seconds
        )
        while not self._stop.is_set():
            try:
                checks = self.client.call(call, Retry(attempts=1))
            except HalfMQError as exc:
                log.warning("pulling checks failed: %s", exc)
                self._stop.wait(min(1.0, mode.pull_wait_seconds))
                continue
            assert self._pool is not None
            for check in checks:
                self._pool.submit(self._answer_pulled, check)

    def _answer_pulled(self, check: Message) -> None:
        state = self.answer_check(check)
        if state is State.UNKNOW or check.transaction_id is None:
            return  # asked again after the check interval
        try:
            self.end(check.transaction_id, state, from_check=True)
        except HalfMQError as exc:
            log.info("answer to the check of %s not applied: %s", check.transaction_id, exc)
