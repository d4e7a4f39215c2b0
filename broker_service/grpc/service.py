"""``apache.rocketmq.v2.MessagingService``: RocketMQ 5's RPCs as thin adapters over the domain.

Each RPC reads its caller (:mod:`.auth`), checks the ACL's needs as the REST route of the same
use case does, converts the request to the domain's records (:mod:`.convert`), calls one domain
service and answers with a ``Status`` in the body, as RocketMQ's proxy does.  The servicer holds
the services the composition hands it; it never reaches the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.acl.model import Need, Perm
from broker_service.acl.runtime import AclRuntime
from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.clients.service import ClientService
from broker_service.domain.consumers.model import Receiving
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import DomainError, Forbidden, InvalidRequest
from broker_service.domain.messages.service import MessageService
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import Decision, ResolvedBy, TransactionRecord
from broker_service.domain.transactions.pulls import PullHub
from broker_service.domain.transactions.service import TransactionService
from broker_service.grpc import convert
from broker_service.grpc.auth import Authenticator, Caller
from broker_service.grpc.status import Code, of_error, ok, status
from broker_service.grpc.telemetry import Registry, Session
from broker_service.metrics import BrokerMetrics
from broker_service.settings import BrokerSettings

log = logging.getLogger("halfmq.grpc")

R = TypeVar("R")
ClientType = pb.ClientType
_PRODUCER = ClientType.PRODUCER
_CONSUMERS = (ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER)
_DECISIONS = {
    pb.TransactionResolution.COMMIT: Decision.COMMIT,
    pb.TransactionResolution.ROLLBACK: Decision.ROLLBACK,
}
_KNOWN_MAX = 100_000  # client ids a broker remembers it introduced; past it, it starts over
VIA = "grpc"  # the protocol the message trace names on what came through this port
DEFAULT_INVISIBLE_SECONDS = 30.0
RECEIVE_BATCH_MAX = 32
NOT_IMPLEMENTED = (
    "QueryOffset",
    "PullMessage",
    "UpdateOffset",
    "GetOffset",
    "RecallMessage",
    "SyncLiteSubscription",
)


class Failed(Exception):
    """An RPC answered with ``status`` (not OK) before it reached the domain."""

    def __init__(self, status: pb.Status) -> None:
        super().__init__(status.message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Served:
    """What the gRPC port serves: the domain's services and what they read besides (the
    broker's own name and limits it reads from its settings, as the REST app does)."""

    transactions: TransactionService
    messages: MessageService
    consumers: ConsumerService
    metrics: BrokerMetrics
    pull_hub: PullHub
    acl: AclRuntime | None
    presence: PresenceService  # the brokers sharing the store: QueryRoute lists the live ones
    clients: ClientService  # the gRPC clients' profiles and last Settings, kept in the store


class MessagingService:
    """The servicer ``add_MessagingServiceServicer_to_server`` is given: one coroutine per RPC."""

    def __init__(
        self, served: Served, settings: BrokerSettings, endpoints: Callable[[], pb.Endpoints]
    ) -> None:
        """``settings``: the broker's name, its ``grpc_producer_groups`` (topic -> producer
        group), its largest message body and longest receive wait."""
        self.served = served
        self.broker_settings = settings
        self.endpoints = endpoints  # this port's address, as a route answers it
        acl = served.acl
        self.auth = (
            None
            if acl is None
            else Authenticator(lambda: acl.config, served.transactions.clock, acl.window_ms)
        )
        self.registry = Registry(
            served.transactions,
            served.pull_hub,
            served.metrics,
            settings.grpc_producer_groups,
            self._store_host,
        )
        self._subscribed: dict[tuple[str, str], str] = {}  # (group, topic) -> expression
        self._known: set[str] = set()  # client ids this broker saw kept in the store
        self._tasks: set[asyncio.Task[None]] = set()
        for name in NOT_IMPLEMENTED:
            setattr(self, name, self._not_implemented(name))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _store_host(self) -> str:
        address = self.endpoints().addresses[0]
        return f"{address.host}:{address.port}"

    def group_of(self, topic: str) -> str:
        return self.broker_settings.grpc_producer_groups.get(topic, topic)

    # -- plumbing --------------------------------------------------------------------------------

    def _caller(self, context: Any, needs: list[Need]) -> Caller:
        caller = Caller.of(context.invocation_metadata() or (), context.peer() or "")
        if self.auth is None:
            return caller
        try:
            access_key = self.auth.authorize(caller, needs)
        except AclError as error:
            raise Failed(of_error(error)) from None
        return replace(caller, access_key=access_key)

    async def _introduce(self, caller: Caller) -> None:
        """Make sure the store knows the calling client before its act is stored: its Settings
        may come later than its first half or receive, or never.  Once per client id and
        broker; a failure is logged, the call goes on (only the trace's ``via`` would miss it)."""
        client_id = caller.client_id
        if not client_id or client_id in self._known:
            return
        try:
            await self.served.clients.introduce(
                client_id, caller.access_key, caller.language or "UNKNOWN", caller.version
            )
        except Exception as error:
            log.warning("client %s not kept: %r", client_id, error)
            return
        if len(self._known) >= _KNOWN_MAX:  # a bound, not a cache policy: they are re-checked
            self._known.clear()
        self._known.add(client_id)

    async def _answer(
        self, rpc_name: str, build: Callable[[pb.Status], R], work: Callable[[], Awaitable[R]]
    ) -> R:
        """Run ``work``; an error of ours, or an unexpected one, becomes ``build(status)``.
        Timed, by RPC and answered code, in ``halfmq_grpc_seconds``."""
        started = time.perf_counter()
        try:
            answer = await work()
        except Failed as failed:
            answer = build(failed.status)
        except (DomainError, AclError) as error:
            answer = build(of_error(error))
        except Exception:
            log.exception("gRPC %s failed", rpc_name)
            answer = build(status(Code.INTERNAL_SERVER_ERROR, "internal error (see broker log)"))
        code = Code.Name(answer.status.code)  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - started
        self.served.metrics.grpc_seconds.labels(rpc=rpc_name, code=code).observe(elapsed)
        return answer

    def _not_implemented(self, name: str) -> Callable[..., Any]:
        response = getattr(rpc, f"{name}Response")
        message = (
            f"{name} is not implemented by halfmq (docs/rocketmq.md lists the RPCs it answers)"
        )

        async def unary(request: Any, context: Any) -> Any:
            return response(status=status(Code.NOT_IMPLEMENTED, message))

        async def streamed(request: Any, context: Any) -> AsyncIterator[Any]:
            yield await unary(request, context)

        return streamed if name == "PullMessage" else unary

    # -- route and heartbeat ---------------------------------------------------------------------

    async def QueryRoute(self, request: rpc.QueryRouteRequest, context: Any) -> Any:
        """The topic's queues, dealt in turn to every live broker with a gRPC port (all brokers
        sharing the store serve every queue, so a client's sends and streams spread over them)."""

        async def work() -> rpc.QueryRouteResponse:
            self._caller(context, [])
            view = await self.served.messages.get_topic(request.topic.name)
            brokers = await self._route_brokers(request.endpoints)
            accepts = _accepted_types(view.topic.ordered)
            queues = [
                pb.MessageQueue(
                    topic=pb.Resource(
                        name=view.topic.name,
                        resource_namespace=request.topic.resource_namespace,
                    ),
                    id=queue.queue_id,
                    permission=pb.Permission.READ_WRITE,
                    broker=brokers[i % len(brokers)],
                    accept_message_types=accepts,
                )
                for i, queue in enumerate(view.queues)
            ]
            return rpc.QueryRouteResponse(status=ok(), message_queues=queues)

        return await self._answer("QueryRoute", lambda s: rpc.QueryRouteResponse(status=s), work)

    async def _route_brokers(self, reached: pb.Endpoints) -> list[pb.Broker]:
        """This broker (by the address the client reached it at, when the request says) and the
        other live brokers with a gRPC port, in the order of their names: every broker answers
        the same route.  Without the list (the store not ready) this broker alone."""
        own = reached if reached.addresses else self.endpoints()
        brokers = {
            self.broker_settings.broker_name: pb.Broker(
                name=self.broker_settings.broker_name, endpoints=own
            )
        }
        try:
            seen = await self.served.presence.brokers()
        except Exception as error:  # the route still works: it names this broker only
            log.warning("QueryRoute names this broker only: the brokers list failed: %r", error)
            seen = []
        for broker in seen:
            address, name = broker.presence.grpc_address, broker.presence.broker_id
            if broker.live and address and name not in brokers:
                brokers[name] = pb.Broker(name=name, endpoints=convert.endpoints_of(address))
        return [brokers[name] for name in sorted(brokers)]

    async def Heartbeat(self, request: rpc.HeartbeatRequest, context: Any) -> Any:
        async def work() -> rpc.HeartbeatResponse:
            needs = []
            if request.client_type in _CONSUMERS and request.group.name:
                needs = [Need.group(request.group.name, Perm.SUB)]
            caller = self._caller(context, needs)
            session = self.registry.session(caller.client_id)
            if request.client_type == _PRODUCER and session is not None:
                await self.registry.heartbeat(session)
            return rpc.HeartbeatResponse(status=ok())

        return await self._answer("Heartbeat", lambda s: rpc.HeartbeatResponse(status=s), work)

    # -- telemetry -------------------------------------------------------------------------------

    async def Telemetry(
        self, requests: AsyncIterator[rpc.TelemetryCommand], context: Any
    ) -> AsyncIterator[rpc.TelemetryCommand]:
        try:
            caller = self._caller(context, [])
        except Failed as failed:
            yield rpc.TelemetryCommand(status=failed.status)
            return
        session = Session(caller, caller.access_key)
        self._count_stream(session, "UNSET")
        reader = asyncio.create_task(self._read_telemetry(requests, session, context))
        if caller.client_id:  # a known client's stream counts at once, before its Settings
            self._background(self._recall(session))
        try:
            while True:
                command = await session.outgoing.get()
                if command is None:
                    break
                yield command
        finally:
            reader.cancel()
            self._count_stream(session, None)
            # not awaited here: a generator the server cancels may not await in its finally
            self._background(self.registry.retire(session, "its Telemetry stream closed"))

    def _count_stream(self, session: Session, kind: str | None) -> None:
        """``halfmq_grpc_streams``: the stream counted under ``kind`` (its client type), or no
        longer counted (None: it ended)."""
        streams = self.served.metrics.grpc_streams
        if session.kind is not None:
            streams.labels(client_type=session.kind).dec()
        session.kind = kind
        if kind is not None:
            streams.labels(client_type=kind).inc()

    async def _read_telemetry(
        self, requests: AsyncIterator[rpc.TelemetryCommand], session: Session, context: Any
    ) -> None:
        try:
            async for command in requests:
                if command.HasField("settings"):
                    session.write(await self._settings(session, command.settings, context))
        except Exception as error:  # the stream broke: the client rebuilds it
            log.debug("telemetry stream of %s ended: %r", session.client_id, error)
        finally:
            session.end()

    async def _settings(
        self, session: Session, settings: pb.Settings, context: Any
    ) -> rpc.TelemetryCommand:
        """The client's Settings: applied, kept in the store, answered with the broker's."""

        def build(s: pb.Status) -> rpc.TelemetryCommand:
            return rpc.TelemetryCommand(status=s)

        async def work() -> rpc.TelemetryCommand:
            reply = await self._apply(session, settings, self._caller(context, []))
            await self._remember(session, settings)
            return rpc.TelemetryCommand(status=ok(), settings=reply)

        return await self._answer("Telemetry", build, work)

    async def _apply(self, session: Session, settings: pb.Settings, caller: Caller) -> pb.Settings:
        """Register the stream's client as its Settings describe it; the broker's settings."""
        if session.kind is not None:  # not once it ended
            self._count_stream(session, pb.ClientType.Name(settings.client_type))
        if settings.client_type == _PRODUCER:
            topics = [topic.name for topic in settings.publishing.topics]
            session.settings = settings
            session.producer_topics = [t for t in topics if self._may_publish(caller, t)]
            await self.registry.register_producer(session)
            return self._producer_settings(settings)
        if settings.client_type in _CONSUMERS:
            subscription = settings.subscription
            group = subscription.group.name
            for entry in subscription.subscriptions:
                # one it may not read is not subscribed; its receives are refused FORBIDDEN
                # a SQL92 one neither: each receive says ILLEGAL_FILTER_EXPRESSION
                sql = entry.expression.type == pb.FilterType.SQL
                if not sql and self._may_read(caller, group, entry.topic.name):
                    await self._subscribe(group, entry.topic.name, entry.expression)
            session.settings = settings
            self.registry.register(session)
            return self._consumer_settings(settings)
        raise Failed(
            status(
                Code.UNRECOGNIZED_CLIENT_TYPE,
                f"client type {pb.ClientType.Name(settings.client_type)} is not supported",
            )
        )

    async def _remember(self, session: Session, settings: pb.Settings) -> None:
        """Keep the client's Settings (and what it says it is) in the store: a stream it reopens
        on any broker sharing the store is registered with them at once (:meth:`_recall`)."""
        agent = settings.user_agent
        language = pb.Language.Name(agent.language) if agent.language else "UNKNOWN"
        try:
            await self.served.clients.remember(
                session.client_id,
                session.access_key,
                language,
                agent.version,
                settings.SerializeToString(),
            )
        except Exception as error:  # registered all the same; only a reopened stream waits
            log.warning("settings of %s not kept: %r", session.client_id, error)
            return
        self._known.add(session.client_id)

    async def _recall(self, session: Session) -> None:
        """A stream opened under a client id the store knows: registered at once with the
        Settings that client last wrote (on any broker), under the same access key only.

        RocketMQ's Python client 5.1.2 rebuilds a broken stream without writing its Settings
        again until its next periodic sync (every 300 s); without this, the checks of a
        producer whose broker restarted would wait for that sync."""
        try:
            profile = await self.served.clients.recall(session.client_id)
            if profile is None or not profile.settings or profile.access_key != session.access_key:
                return  # unknown, known only by a call's metadata, or someone else's
            if session.settings is not None:  # its own Settings came first
                return
            settings = pb.Settings.FromString(profile.settings)
            await self._apply(session, settings, session.caller)
        except Exception as error:  # its own Settings register it when they come
            log.warning(
                "stream of %s not registered from kept settings: %r", session.client_id, error
            )
            return
        log.info("stream of %s registered with the Settings it last wrote", session.client_id)

    def _may_publish(self, caller: Caller, topic: str) -> bool:
        """PUB on the topic and its producer group: only then is the producer an instance of
        the group, sent its checks (a check carries the half's body).  Its sends are refused
        FORBIDDEN one by one; its settings are answered all the same, as the proxy does."""
        if self.auth is None or caller.access_key is None:
            return True
        needs = [Need.topic(topic, Perm.PUB), Need.group(self.group_of(topic), Perm.PUB)]
        try:
            authorize(self.auth.config(), caller.access_key, caller.address, needs)
        except AclError:
            log.info(
                "gRPC producer %s may not publish to %s: not its group's instance", caller, topic
            )
            return False
        return True

    def _may_read(self, caller: Caller, group: str, topic: str) -> bool:
        if self.auth is None or caller.access_key is None:
            return True
        needs = [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)]
        try:
            authorize(self.auth.config(), caller.access_key, caller.address, needs)
        except AclError:
            return False
        return True

    def _producer_settings(self, settings: pb.Settings) -> pb.Settings:
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.publishing.max_body_size = self.broker_settings.max_message_bytes
        reply.publishing.validate_message_type = True
        reply.backoff_policy.CopyFrom(_backoff(3))
        return reply

    def _consumer_settings(self, settings: pb.Settings) -> pb.Settings:
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.subscription.receive_batch_size = RECEIVE_BATCH_MAX
        if not reply.subscription.HasField("long_polling_timeout"):
            reply.subscription.long_polling_timeout.CopyFrom(
                convert.to_duration(self.broker_settings.receive_max_wait_seconds)
            )
        reply.backoff_policy.CopyFrom(_backoff(17))  # 16 retries: max_reconsume_times' default
        return reply

    async def _subscribe(self, group: str, topic: str, expression: pb.FilterExpression) -> str:
        """Subscribe ``group`` to ``topic`` with a TAG expression (an unchanged one is not
        written again); a SQL92 filter is refused."""
        if expression.type == pb.FilterType.SQL:
            raise Failed(
                status(
                    Code.ILLEGAL_FILTER_EXPRESSION,
                    "SQL92 filters are not supported by halfmq: subscribe with a TAG expression",
                )
            )
        text = expression.expression or "*"
        if self._subscribed.get((group, topic)) != text:
            await self.served.consumers.subscribe(group, topic, text)
            self._subscribed[(group, topic)] = text
        return text

    # -- sending ---------------------------------------------------------------------------------

    async def SendMessage(self, request: rpc.SendMessageRequest, context: Any) -> Any:
        async def work() -> rpc.SendMessageResponse:
            if not request.messages:
                raise InvalidRequest("no message to send")
            needs = []
            for message in request.messages:
                needs.append(Need.topic(message.topic.name, Perm.PUB))
                if message.system_properties.message_type == convert.MessageType.TRANSACTION:
                    needs.append(Need.group(self.group_of(message.topic.name), Perm.PUB))
            caller = self._caller(context, needs)
            await self._introduce(caller)
            client_id = caller.client_id or None  # a half's sender: check-back asks it first
            entries = [await self._send_one(message, client_id) for message in request.messages]
            first_error = next((e.status for e in entries if e.status.code != Code.OK), None)
            return rpc.SendMessageResponse(status=first_error or ok(), entries=entries)

        return await self._answer("SendMessage", lambda s: rpc.SendMessageResponse(status=s), work)

    async def _send_one(self, message: pb.Message, client_id: str | None) -> rpc.SendResultEntry:
        topic = message.topic.name
        try:
            draft = convert.draft_of(message)
            system = message.system_properties
            if system.message_type == convert.MessageType.TRANSACTION:
                immunity = None
                if system.HasField("orphaned_transaction_recovery_duration"):
                    duration = system.orphaned_transaction_recovery_duration
                    immunity = convert.duration_seconds(duration) or None
                receipt = await self.served.transactions.prepare(
                    topic, draft, self.group_of(topic), immunity, client_id
                )
                if not receipt.duplicate:
                    self.served.metrics.halves.inc()
                return rpc.SendResultEntry(
                    status=ok(),
                    message_id=receipt.msg_id,
                    transaction_id=receipt.transaction_id,
                )
            (sent,) = await self.served.messages.send(topic, [draft])
            self.served.metrics.messages_sent.labels(duplicate=str(sent.duplicate).lower()).inc()
            offset = sent.message.queue_offset if sent.deliver_at is None else 0
            return rpc.SendResultEntry(status=ok(), message_id=sent.msg_id, offset=max(offset, 0))
        except DomainError as error:
            return rpc.SendResultEntry(
                status=of_error(error), message_id=message.system_properties.message_id
            )

    async def EndTransaction(self, request: rpc.EndTransactionRequest, context: Any) -> Any:
        async def work() -> rpc.EndTransactionResponse:
            topic = request.topic.name
            group = self.group_of(topic)
            caller = self._caller(
                context, [Need.topic(topic, Perm.PUB), Need.group(group, Perm.PUB)]
            )
            await self._introduce(caller)
            decision = _DECISIONS.get(request.resolution)
            from_check = request.source == pb.TransactionSource.SOURCE_SERVER_CHECK
            if decision is None:  # UNKNOWN: the half stays, the next round checks it again
                return rpc.EndTransactionResponse(status=ok())
            by = ResolvedBy.CHECK if from_check else ResolvedBy.PRODUCER
            resolving = Resolving(
                request.transaction_id,
                decision,
                group,
                by,
                self._guard(caller),
                client_id=caller.client_id or None,
                pull_answer=from_check,
                via=VIA,
            )
            resolution = await self.served.transactions.resolve(resolving)
            self.served.metrics.count_resolution(
                resolution.state.value, by.value, decision.value, resolution.check_latency_ms
            )
            return rpc.EndTransactionResponse(status=ok())

        return await self._answer(
            "EndTransaction", lambda s: rpc.EndTransactionResponse(status=s), work
        )

    def _guard(self, caller: Caller) -> Callable[[TransactionRecord], None] | None:
        """With the ACL on: PUB on the transaction's own topic and group, checked by the unit
        that resolves it (a request naming another topic does not pass)."""
        auth, access_key = self.auth, caller.access_key
        if auth is None or access_key is None:
            return None

        def may_end(record: TransactionRecord) -> None:
            needs = [
                Need.topic(record.topic, Perm.PUB),
                Need.group(record.producer_group, Perm.PUB),
            ]
            try:
                authorize(auth.config(), access_key, caller.address, needs)
            except AclError as error:
                raise Forbidden(error.message, code=str(error.code), **error.detail) from None

        return may_end

    # -- consuming -------------------------------------------------------------------------------

    async def ReceiveMessage(
        self, request: rpc.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        answers: list[rpc.ReceiveMessageResponse] = []

        async def work() -> rpc.ReceiveMessageResponse:
            group, topic = request.group.name, request.message_queue.topic.name
            caller = self._caller(
                context, [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)]
            )
            await self._introduce(caller)
            await self._subscribe(group, topic, request.filter_expression)
            invisible = DEFAULT_INVISIBLE_SECONDS
            if request.HasField("invisible_duration"):
                invisible = convert.duration_seconds(request.invisible_duration)
            wait = 0.0
            if request.HasField("long_polling_timeout"):
                wait = convert.duration_seconds(request.long_polling_timeout)
            batch = min(max(request.batch_size, 1), RECEIVE_BATCH_MAX)
            member = caller.client_id or caller.address
            receiving = Receiving(group, member, topic, batch, invisible, wait)
            delivered = await self.served.consumers.receive(receiving)
            self.served.metrics.count_receive(len(delivered))
            host = self._store_host()
            if delivered:  # when they left the broker: a push consumer times its work from it
                now = convert.to_timestamp(self.served.transactions.clock())
                answers.append(rpc.ReceiveMessageResponse(delivery_timestamp=now))
            answers.extend(
                rpc.ReceiveMessageResponse(message=convert.delivered_message(d, host))
                for d in delivered
            )
            if not delivered:
                return rpc.ReceiveMessageResponse(
                    status=status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
            return rpc.ReceiveMessageResponse(status=ok())

        last = await self._answer(
            "ReceiveMessage", lambda s: rpc.ReceiveMessageResponse(status=s), work
        )
        for answer in answers:
            yield answer
        yield last

    async def AckMessage(self, request: rpc.AckMessageRequest, context: Any) -> Any:
        async def work() -> rpc.AckMessageResponse:
            group, topic = request.group.name, request.topic.name
            self._caller(context, [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)])
            handles = [entry.receipt_handle for entry in request.entries]
            result = await self.served.consumers.ack(group, handles)
            self.served.metrics.count_ack(result.acked, len(result.stale))
            stale = set(result.stale)
            gone = status(
                Code.INVALID_RECEIPT_HANDLE,
                "the receipt handle is stale: its invisibility ran out, the message comes again",
            )
            entries = [
                rpc.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=gone if entry.receipt_handle in stale else ok(),
                )
                for entry in request.entries
            ]
            first_error = next((e.status for e in entries if e.status.code != Code.OK), None)
            return rpc.AckMessageResponse(status=first_error or ok(), entries=entries)

        return await self._answer("AckMessage", lambda s: rpc.AckMessageResponse(status=s), work)

    async def ChangeInvisibleDuration(
        self, request: rpc.ChangeInvisibleDurationRequest, context: Any
    ) -> Any:
        async def work() -> rpc.ChangeInvisibleDurationResponse:
            group, topic = request.group.name, request.topic.name
            self._caller(context, [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)])
            seconds = convert.duration_seconds(request.invisible_duration)
            delivery = await self.served.consumers.change_invisible(
                group, request.receipt_handle, seconds
            )
            return rpc.ChangeInvisibleDurationResponse(
                status=ok(), receipt_handle=delivery.receipt_handle
            )

        return await self._answer(
            "ChangeInvisibleDuration",
            lambda s: rpc.ChangeInvisibleDurationResponse(status=s),
            work,
        )

    async def QueryAssignment(self, request: rpc.QueryAssignmentRequest, context: Any) -> Any:
        """A push consumer's queues: halfmq balances a group's members itself at each receive,
        so every member is assigned the whole topic as one queue of this broker."""

        async def work() -> rpc.QueryAssignmentResponse:
            group, topic = request.group.name, request.topic.name
            self._caller(context, [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)])
            view = await self.served.messages.get_topic(topic)
            endpoints = request.endpoints if request.endpoints.addresses else self.endpoints()
            queue = pb.MessageQueue(
                topic=request.topic,
                id=0,
                permission=pb.Permission.READ_WRITE,
                broker=pb.Broker(name=self.broker_settings.broker_name, id=0, endpoints=endpoints),
                accept_message_types=_accepted_types(view.topic.ordered),
            )
            return rpc.QueryAssignmentResponse(
                status=ok(), assignments=[pb.Assignment(message_queue=queue)]
            )

        return await self._answer(
            "QueryAssignment", lambda s: rpc.QueryAssignmentResponse(status=s), work
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: rpc.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> Any:
        """A push consumer gives up on a message after its last attempt: a nack, which past the
        group's ``max_reconsume_times`` moves it to ``%DLQ%{group}`` (the client asks only then,
        by the attempts this broker's settings told it)."""

        async def work() -> rpc.ForwardMessageToDeadLetterQueueResponse:
            group, topic = request.group.name, request.topic.name
            self._caller(context, [Need.group(group, Perm.SUB), Need.topic(topic, Perm.SUB)])
            result = await self.served.consumers.nack(group, request.receipt_handle, None)
            self.served.metrics.consumer_messages.labels(outcome=result.outcome.lower()).inc()
            return rpc.ForwardMessageToDeadLetterQueueResponse(status=ok())

        return await self._answer(
            "ForwardMessageToDeadLetterQueue",
            lambda s: rpc.ForwardMessageToDeadLetterQueueResponse(status=s),
            work,
        )

    async def NotifyClientTermination(
        self, request: rpc.NotifyClientTerminationRequest, context: Any
    ) -> Any:
        async def work() -> rpc.NotifyClientTerminationResponse:
            caller = self._caller(context, [])
            session = self.registry.session(caller.client_id)
            if session is not None:
                await self.registry.retire(session, "it terminated (NotifyClientTermination)")
            return rpc.NotifyClientTerminationResponse(status=ok())

        return await self._answer(
            "NotifyClientTermination",
            lambda s: rpc.NotifyClientTerminationResponse(status=s),
            work,
        )


def _accepted_types(ordered: bool) -> list[int]:
    """An ordered topic takes FIFO messages; any other NORMAL, DELAY and TRANSACTION ones."""
    if ordered:
        return [pb.MessageType.FIFO]
    return [pb.MessageType.NORMAL, pb.MessageType.DELAY, pb.MessageType.TRANSACTION]


def _backoff(attempts: int) -> pb.RetryPolicy:
    return pb.RetryPolicy(
        max_attempts=attempts,
        exponential_backoff=pb.ExponentialBackoff(
            initial=convert.to_duration(1), max=convert.to_duration(60), multiplier=2
        ),
    )
