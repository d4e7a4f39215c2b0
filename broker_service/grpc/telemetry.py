"""The clients this broker holds a Telemetry stream of, and check-back through those streams.

A RocketMQ 5 client opens one Telemetry stream per broker, writes its ``Settings`` first (its
type, its topics or subscriptions, its language and version) and keeps the stream open; the
broker answers with its own settings and, for a producer, writes each check down the stream as a
``RecoverOrphanedTransactionCommand``.  The producer answers a check with a separate
EndTransaction (``source = SOURCE_SERVER_CHECK``), or not at all when its checker raises.

Check-back's third transport: to the check-back scheduler a gRPC producer is a *pull* instance
(no callback URL) of each producer group its topics belong to.  The broker holding its stream
pulls the checks assigned to it -- woken at once by this broker's scheduler through the
:class:`PullHub`, and looking in the store at least once a second for checks another broker's
round assigned -- and writes them down the stream.  So a check reaches the producer whichever
broker on the same database claimed the half, and it is counted, traced and audited exactly as a
REST pull check: counted when taken, its silence UNKNOWN at the next round, its answer applied
as a commit or rollback ``from_check``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc

from broker_service.domain.errors import DomainError
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.grpc import convert
from broker_service.grpc.auth import Caller
from broker_service.metrics import BrokerMetrics

log = logging.getLogger("halfmq.grpc")

_CHECKS_PER_TAKE = 32
_LOOK_AGAIN_SECONDS = 1.0  # how soon a check another broker assigned is found in the store
_END = None  # put on a session's queue: the stream ends


@dataclass(eq=False)
class Session:
    """One open Telemetry stream: what its client said in its Settings, and the commands the broker
    writes down the stream (``outgoing``)."""

    caller: Caller
    access_key: str | None
    settings: pb.Settings | None = None
    # a producer's topics it may publish to (with the ACL on: PUB on the topic and its group):
    # the groups it is an instance of, and whose checks it is sent
    producer_topics: list[str] = field(default_factory=list)
    outgoing: asyncio.Queue[rpc.TelemetryCommand | None] = field(default_factory=asyncio.Queue)
    pumps: list[asyncio.Task[None]] = field(default_factory=list)
    closed: bool = False  # its stream ended: never registered again
    kind: str | None = None  # the client type it is counted under in halfmq_grpc_streams

    @property
    def client_id(self) -> str:
        return self.caller.client_id

    def write(self, command: rpc.TelemetryCommand) -> None:
        self.outgoing.put_nowait(command)

    def end(self) -> None:
        self.outgoing.put_nowait(_END)


def producer_groups(topics: list[str], mapping: Mapping[str, str]) -> dict[str, list[str]]:
    """The producer groups of a gRPC producer's topics: a topic's group is what ``mapping``
    (``grpc_producer_groups``) names, else the topic's own name (RocketMQ's proxy)."""
    groups: dict[str, list[str]] = {}
    for topic in topics:
        groups.setdefault(mapping.get(topic, topic), []).append(topic)
    return groups


@dataclass(eq=False)
class Registry:
    """The sessions of this broker's streams, by client id, and their check pumps."""

    transactions: TransactionService
    hub: PullHub
    metrics: BrokerMetrics
    group_of: Mapping[str, str]
    store_host: Callable[[], str]
    sessions: dict[str, Session] = field(default_factory=dict, init=False)
    # the broker stops: its streams end, their clients are not retired
    stopping: bool = field(default=False, init=False)

    def session(self, client_id: str) -> Session | None:
        return self.sessions.get(client_id)

    def groups(self, session: Session) -> dict[str, list[str]]:
        return producer_groups(session.producer_topics, self.group_of)

    async def register_producer(self, session: Session) -> None:
        """A producer's Settings: live in each of its groups now (it need not wait for its first
        heartbeat), and its checks pumped down its stream."""
        if not self.register(session):
            return
        await self.heartbeat(session)
        for group in self.groups(session):  # a stream that opens is proof it can be reached
            await self.transactions.back_in_reach(group, session.client_id)
        if not session.pumps and not session.closed:  # it may have ended while we wrote
            session.pumps = [
                asyncio.create_task(self._pump(session, group), name=f"halfmq-grpc-checks-{group}")
                for group in self.groups(session)
            ]

    def register(self, session: Session) -> bool:
        """The session is its client's (one it had before is closed); False if it has ended."""
        if session.closed:
            return False
        old = self.sessions.get(session.client_id)
        if old is not None and old is not session:
            self.close(old)
        self.sessions[session.client_id] = session
        return True

    async def heartbeat(self, session: Session) -> None:
        for group, topics in self.groups(session).items():
            await self.transactions.heartbeat(
                group, session.client_id, None, topics, session.access_key, None
            )
            self.metrics.heartbeats.inc()

    async def retire(self, session: Session, why: str) -> None:
        """The client's stream ended, or it said it terminates: its checks go to the group's
        other instances while it is set aside (a new stream of it is registered as it opens)."""
        replaced = self.sessions.get(session.client_id) not in (None, session)
        self.close(session)
        if replaced or self.stopping or not session.producer_topics:
            return
        for group in self.groups(session):
            try:
                await self.transactions.set_aside(group, session.client_id, why)
            except DomainError as error:
                log.warning("instance %s of %s not set aside: %s", session.client_id, group, error)

    def close(self, session: Session) -> None:
        """The stream ended (or a newer one of the same client replaced it)."""
        session.closed = True
        for task in session.pumps:
            task.cancel()
        session.pumps = []
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        session.end()

    async def close_all(self) -> None:
        self.stopping = True
        sessions = list(self.sessions.values())
        tasks = [task for s in sessions for task in s.pumps]
        for session in sessions:
            self.close(session)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _pump(self, session: Session, group: str) -> None:
        """Take the checks assigned to this client in ``group`` and write them down its stream."""
        client_id = session.client_id
        event = self.hub.event(group, client_id)
        try:
            while True:
                event.clear()
                try:
                    checks = await self.transactions.pull_checks(group, client_id, _CHECKS_PER_TAKE)
                except Exception as error:  # the store not ready: look again shortly
                    log.warning("checks of %s in %s not taken: %r", client_id, group, error)
                    checks = []
                for check in checks:
                    command = rpc.TelemetryCommand(
                        recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
                            message=convert.check_message(check, self.store_host()),
                            transaction_id=check.transaction_id,
                        )
                    )
                    session.write(command)
                if checks:
                    self.metrics.checks.labels(outcome="pulled").inc(len(checks))
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=_LOOK_AGAIN_SECONDS)
        finally:
            self.hub.release(group, client_id)
