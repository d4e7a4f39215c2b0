"""halfmq's client framework: decorated producers and consumers, sync and asyncio.

::

    from framework import TransactionProducer, Message, LocalTransactionState

    producer = TransactionProducer("bob-bank", brokers=["http://127.0.0.1:9876"])

    @producer.execute_local_transaction("transfers")
    def debit(message: Message, arg) -> LocalTransactionState: ...

Modules, one idea each: :mod:`~framework.message` (values and states), :mod:`~framework.config`
(Timeout, Retry, CheckMode), :mod:`~framework.errors` (one exception root),
:mod:`~framework.protocol` (the REST contract without I/O), :mod:`~framework.transport` (the
sync and async drivers), :mod:`~framework.producer` / :mod:`~framework.aio_producer`, :mod:`~framework.consumer` /
:mod:`~framework.aio_consumer`, :mod:`~framework.inbox`,
:mod:`~framework.txlog` and :mod:`~framework.tables` (the SQLAlchemy local-transaction log and
inbox), :mod:`~framework.fastapi`, :mod:`~framework.testing` (an in-process broker).
"""

from framework.aio_consumer import AsyncPushConsumer
from framework.aio_producer import AsyncTransactionProducer
from framework.config import CheckMode, Retry, Timeout
from framework.consumer import PushConsumer
from framework.consumer_base import AckMode, BatchAck, DedupKey
from framework.errors import (
    BrokerBusyError,
    BrokerError,
    BrokerUnavailableError,
    ConfigurationError,
    ConflictError,
    HalfMQError,
    InvalidRequestError,
    MessageTooLargeError,
    NotFoundError,
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

__all__ = [
    "AckMode",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "BatchAck",
    "BrokerBusyError",
    "BrokerError",
    "BrokerUnavailableError",
    "CheckMode",
    "ConfigurationError",
    "ConflictError",
    "ConsumeResult",
    "DedupKey",
    "HalfMQError",
    "InvalidRequestError",
    "LocalTransactionState",
    "Message",
    "MessageTooLargeError",
    "NotFoundError",
    "PushConsumer",
    "Registered",
    "Retry",
    "SendResult",
    "SendStatus",
    "Timeout",
    "TransactionProducer",
    "TransactionSendResult",
]
