"""Protobuf to the domain's records and back: a sent ``Message`` to a :class:`MessageDraft`, a
delivered or checked message to a ``Message``, times to ``Timestamp`` / ``Duration``.  No I/O."""

from __future__ import annotations

import hashlib
import ipaddress
import zlib
from collections.abc import Mapping

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_service.domain.consumers.model import Delivered
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import (
    RESERVED_PROPERTIES,
    Encoding,
    MessageDraft,
    StoredMessage,
)
from broker_service.domain.transactions.checkback import CheckRequest

MessageType = pb.MessageType

# What the broker keeps among a stored message's properties for itself: not shown to a client.
_HIDDEN_PROPERTIES = RESERVED_PROPERTIES | {"DISCARD_REASON"}
TRACEPARENT = "traceparent"


def timestamp_ms(value: Timestamp) -> int:
    return int(value.seconds * 1000 + value.nanos // 1_000_000)


def to_timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_seconds(value: Duration) -> float:
    return float(value.seconds + value.nanos / 1e9)


def to_duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def endpoints_of(address: str) -> pb.Endpoints:
    """``host:port`` (``[v6]:port``) as a route's endpoints."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = (
            pb.AddressScheme.IPv6
            if ipaddress.ip_address(host).version == 6
            else pb.AddressScheme.IPv4
        )
    except ValueError:
        scheme = pb.AddressScheme.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def draft_of(message: pb.Message) -> MessageDraft:
    """A sent message as the domain's draft: the client's ``message_id`` is its id (a retransmit
    is answered again), ``message_group`` its sharding key, ``delivery_timestamp`` its delivery
    time, ``trace_context`` its ``traceparent`` property."""
    system = message.system_properties
    if system.body_encoding == pb.Encoding.GZIP:
        try:
            body = zlib.decompress(message.body, wbits=31)
        except zlib.error:
            raise InvalidRequest("the body is not GZIP", code="MESSAGE_CORRUPTED") from None
    else:
        body = message.body
    properties = dict(message.user_properties)
    if system.HasField("trace_context") and system.trace_context:
        properties.setdefault(TRACEPARENT, system.trace_context)
    message_type = system.message_type
    if message_type in (MessageType.LITE, MessageType.PRIORITY):
        raise InvalidRequest(
            f"{MessageType.Name(message_type)} messages are not supported by halfmq",
            code="MESSAGE_TYPE_UNSUPPORTED",
        )
    group = system.message_group if system.HasField("message_group") else None
    if message_type == MessageType.FIFO and not group:
        raise InvalidRequest("a FIFO message needs a message_group", code="MESSAGE_GROUP")
    deliver_at = None
    if system.HasField("delivery_timestamp"):
        deliver_at = timestamp_ms(system.delivery_timestamp)
    if message_type == MessageType.DELAY and deliver_at is None:
        raise InvalidRequest("a DELAY message needs a delivery_timestamp", code="DELIVERY_TIME")
    return MessageDraft(
        body=body,
        encoding=_encoding(body),
        tags=system.tag if system.HasField("tag") else None,
        keys=tuple(system.keys),
        properties=properties,
        sharding_key=group or None,
        deliver_at=deliver_at,
        msg_id=system.message_id or None,
        born_at=timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else None,
    )


def _encoding(body: bytes) -> Encoding:
    """How the REST API and the console show the body: text when it is UTF-8, else base64."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return Encoding.BASE64
    return Encoding.UTF8


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in _HIDDEN_PROPERTIES}


def message_type_of(sharding_key: str | None, deliver_at: int | None, transactional: bool) -> int:
    if transactional:
        return int(MessageType.TRANSACTION)
    if sharding_key:
        return int(MessageType.FIFO)
    if deliver_at is not None:
        return int(MessageType.DELAY)
    return int(MessageType.NORMAL)


def body_digest(body: bytes) -> pb.Digest:
    """MD5, upper-case hex, as every client computes it: without a digest a client logs an error
    for each message, with a wrong one a push consumer discards it.  Not CRC32: the Python client
    spells it as eight hex digits, the Node.js client in decimal, so one of them would call every
    message corrupted."""
    return pb.Digest(type=pb.DigestType.MD5, checksum=hashlib.md5(body).hexdigest().upper())


def message(
    topic: str,
    source: CheckRequest | StoredMessage,
    *,
    born_at: int,
    message_type: int,
    store_host: str,
) -> pb.Message:
    """``source`` (a stored message, or the half a check asks about) as a message of ``topic``."""
    body, properties = source.body, source.properties
    system = pb.SystemProperties(
        keys=list(source.keys),
        message_id=source.msg_id,
        body_digest=body_digest(body),
        body_encoding=pb.Encoding.IDENTITY,
        message_type=message_type,
        born_timestamp=to_timestamp(born_at),
        born_host="",
        store_host=store_host,
    )
    if source.tags:
        system.tag = source.tags
    trace = properties.get(TRACEPARENT)
    if trace:
        system.trace_context = trace
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties=user_properties(properties),
        system_properties=system,
        body=body,
    )


def check_message(request: CheckRequest, store_host: str) -> pb.Message:
    """The half a check asks about, as a RecoverOrphanedTransactionCommand carries it."""
    return message(
        request.topic,
        request,
        born_at=0,
        message_type=MessageType.TRANSACTION,
        store_host=store_host,
    )


def delivered_message(delivered: Delivered, store_host: str) -> pb.Message:
    """A message handed to a consumer: its receipt handle, ``delivery_attempt`` (the first
    delivery is 1) and the time its invisibility ends."""
    stored = delivered.message
    out = message(
        delivered.topic,
        stored,
        born_at=stored.born_at,
        message_type=message_type_of(
            stored.sharding_key, stored.deliver_at, stored.transaction_id is not None
        ),
        store_host=store_host,
    )
    system = out.system_properties
    system.store_timestamp.CopyFrom(to_timestamp(stored.stored_at))
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    system.receipt_handle = delivered.receipt_handle
    system.delivery_attempt = delivered.reconsume_times + 1
    if stored.sharding_key:
        system.message_group = stored.sharding_key
    if stored.deliver_at is not None:
        system.delivery_timestamp.CopyFrom(to_timestamp(stored.deliver_at))
    return out
