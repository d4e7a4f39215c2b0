"""Statuses: the domain's and the ACL's errors as RocketMQ's ``apache.rocketmq.v2.Code``.

Every answer of the protocol carries a ``Status{code, message}`` in its body (the gRPC call itself
ends OK), as RocketMQ's proxy answers: a client reads the code and raises its own exception.  An
error of ours becomes the code the proxy answers for the same fault; the message says what was
wrong, never a secret.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_service.acl.errors import AclDenied, AclError
from broker_service.domain.errors import (
    Busy,
    Conflict,
    DomainError,
    Forbidden,
    InvalidRequest,
    MessageTooLarge,
    NotFound,
    NotReady,
    Unauthenticated,
)

Code = pb.Code

# The domain's specific codes that RocketMQ names more precisely than the error's class does.
_BY_DOMAIN_CODE: dict[str, int] = {
    "TOPIC_NOT_FOUND": Code.TOPIC_NOT_FOUND,
    "TOPIC_EXPIRED": Code.TOPIC_NOT_FOUND,
    "GROUP_NOT_FOUND": Code.CONSUMER_GROUP_NOT_FOUND,
    "CONSUMER_GROUP_NOT_FOUND": Code.CONSUMER_GROUP_NOT_FOUND,
    "TRANSACTION_NOT_FOUND": Code.INVALID_TRANSACTION_ID,
    "TRANSACTION_EXPIRED": Code.INVALID_TRANSACTION_ID,
    "HALF_MESSAGE_NOT_FOUND": Code.INVALID_TRANSACTION_ID,
    "DELIVER_AT_TOO_FAR": Code.ILLEGAL_DELIVERY_TIME,
    "RESERVED_PROPERTY": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "MESSAGE_TYPE_UNSUPPORTED": Code.UNSUPPORTED,
    "MESSAGE_GROUP": Code.ILLEGAL_MESSAGE_GROUP,
    "DELIVERY_TIME": Code.ILLEGAL_DELIVERY_TIME,
    "MESSAGE_CORRUPTED": Code.MESSAGE_CORRUPTED,
    "INVALID_TOPIC_NAME": Code.ILLEGAL_TOPIC,
    "SYSTEM_TOPIC": Code.ILLEGAL_TOPIC,
    "INVALID_CONSUMER_GROUP_NAME": Code.ILLEGAL_CONSUMER_GROUP,
    "INVALID_PRODUCER_GROUP_NAME": Code.BAD_REQUEST,
    "INVALID_TAG": Code.ILLEGAL_MESSAGE_TAG,
    "INVALID_KEYS": Code.ILLEGAL_MESSAGE_KEY,
    "INVALID_EXPRESSION": Code.ILLEGAL_FILTER_EXPRESSION,
    "INVALID_INVISIBLE_TIME": Code.ILLEGAL_INVISIBLE_TIME,
    "MESSAGE_ID_CONFLICT": Code.ILLEGAL_MESSAGE_ID,
    "RECEIPT_HANDLE_NOT_FOUND": Code.INVALID_RECEIPT_HANDLE,
    "RECEIPT_HANDLE_EXPIRED": Code.INVALID_RECEIPT_HANDLE,
}


def ok() -> pb.Status:
    return pb.Status(code=Code.OK, message="OK")


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


def of_error(error: DomainError | AclError) -> pb.Status:
    """The status a client is answered for one of our errors."""
    if isinstance(error, AclError):
        code = Code.FORBIDDEN if isinstance(error, AclDenied) else Code.UNAUTHORIZED
        return status(code, f"{error.code.value}: {error.message}")
    specific = _BY_DOMAIN_CODE.get(error.code)
    return status(specific or _by_class(error), f"{error.code}: {error.message}")


def _by_class(error: DomainError) -> int:
    if isinstance(error, Forbidden):
        return int(Code.FORBIDDEN)
    if isinstance(error, Unauthenticated):
        return int(Code.UNAUTHORIZED)
    if isinstance(error, NotFound):
        return int(Code.NOT_FOUND)
    if isinstance(error, MessageTooLarge):
        return int(Code.MESSAGE_BODY_TOO_LARGE)
    if isinstance(error, Busy):
        return int(Code.TOO_MANY_REQUESTS)
    if isinstance(error, NotReady):
        return int(
            Code.HA_NOT_AVAILABLE
        )  # the store: not ready now, the same request may pass later
    if isinstance(error, Conflict):
        return int(Code.PRECONDITION_FAILED)
    if isinstance(error, InvalidRequest):
        return int(Code.BAD_REQUEST)
    return int(Code.INTERNAL_SERVER_ERROR)
