"""halfmq's client framework: decorated producers and consumers, sync and asyncio.

::

    from framework import TransactionProducer, Message, LocalTransactionState

    producer = TransactionProducer("bob-bank", brokers=["http://127.0.0.1:9876"])

    @producer.execute_local_transaction("transfers")
    def debit(message: Message, arg) -> LocalTransactionState: ...

Every producer and consumer signs its requests for a broker with the ACL on: pass
``credentials=(access_key, secret_key)`` (or a :class:`Credentials`); without it they read
``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY`` when built, and send unsigned requests when neither
is set.

Modules, one idea each: :mod:`~framework.message` (values and states), :mod:`~framework.config`
(Timeout, Retry, CheckMode), :mod:`~framework.errors` (one exception root),
:mod:`~framework.protocol` (the REST contract without I/O), :mod:`~framework.flow` (decision flows
without I/O), :mod:`~framework.transport` (the sync and async drivers), :mod:`~framework.producer_base`
/ :mod:`~framework.consumer_base` (the producer's and consumer's flows, written once),
:mod:`~framework.producer` / :mod:`~framework.aio_producer`, :mod:`~framework.consumer` /
:mod:`~framework.aio_consumer` (the faces that drive them), :mod:`~framework.acks`, :mod:`~framework.inbox`,
:mod:`~framework.txlog` and :mod:`~framework.tables` (the SQLAlchemy local-transaction log and
inbox), :mod:`~framework.signing` (signed requests and checks), :mod:`~framework.otel`
(OpenTelemetry spans and context, when ``opentelemetry-api`` is installed),
:mod:`~framework.client_trace` (send and consume costs reported to the broker; off unless
``client_trace=True`` or ``HALFMQ_CLIENT_TRACE=true``), :mod:`~framework.fastapi`,
:mod:`~halfmq.testing` (an in-process broker).
"""

from framework.acks import AckMode, BatchAck, DedupKey
from framework.aio_consumer import AsyncPushConsumer
from framework.aio_producer import AsyncTransactionProducer
from framework.config import CheckMode, Retry, Timeout
from framework.consumer import PushConsumer
from framework.errors import (
    AuthenticationError,
    BodyDecodeError,
    BrokerBusyError,
    BrokerError,
    BrokerUnavailableError,
    ClockSkewError,
    ConfigurationError,
    ConflictError,
    HalfMQError,
    InvalidRequestError,
    MessageTooLargeError,
    NotFoundError,
    OneWayInTransactionError,
    PermissionDeniedError,
    SignatureRejected,
)
from framework.message import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from framework.producer import TransactionProducer
from framework.registry import Registered
from framework.signing import Credentials

__all__ = [
    "AckMode",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "AuthenticationError",
    "BatchAck",
    "BodyDecodeError",
    "BrokerBusyError",
    "BrokerError",
    "BrokerUnavailableError",
    "CheckMode",
    "ClockSkewError",
    "ConfigurationError",
    "ConflictError",
    "ConsumeResult",
    "Credentials",
    "DedupKey",
    "HalfMQError",
    "InvalidRequestError",
    "LocalTransactionState",
    "Message",
    "MessageTooLargeError",
    "NotFoundError",
    "OneWayInTransactionError",
    "PermissionDeniedError",
    "PushConsumer",
    "Registered",
    "Retry",
    "SendResult",
    "SendStatus",
    "SignatureRejected",
    "Timeout",
    "TransactionProducer",
    "TransactionSendResult",
]
