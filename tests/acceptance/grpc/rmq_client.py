"""The unmodified RocketMQ 5 Python client (``rocketmq-python-client``), driven as its own process by
the gRPC tests: one scenario per run, each event printed as a JSON line on stdout.

    python tests/acceptance/grpc/rmq_client.py ENDPOINT SCENARIO [options]

Scenarios: ``send`` (NORMAL; ``--group`` FIFO; ``--delay-seconds`` DELAY), ``commit`` and
``rollback`` (a transaction ended by the producer), ``orphan`` (a half left open; its checker
answers ``--answer`` COMMIT / ROLLBACK / UNKNOWN / RAISE and the process stays up ``--seconds``),
``push`` (a PushConsumer whose listener fails a body that starts with ``fail``), ``receive``
(a SimpleConsumer: ``--ack``, ``--change-invisible``, ``--count``); ``--tls``
trusts the roots ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` names.  Errors are
printed as ``{"event": "error", "type": ..., "message": ...}``; the exit status is 0 unless the
client could not start.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

_SAYING = threading.Lock()


def say(**event: Any) -> None:
    """One JSON line, whole: a PushConsumer's listener runs on several threads, and two prints at
    once could put two events on one line (print writes the text and its newline apart), which
    the test's reader then drops."""
    line = json.dumps(event) + "\n"
    with _SAYING:
        sys.stdout.write(line)
        sys.stdout.flush()


def error(exc: BaseException) -> None:
    say(event="error", type=type(exc).__name__, message=str(exc))


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, message: Message) -> TransactionResolution:
        say(
            event="checked",
            message_id=message.message_id,
            topic=message.topic,
            tag=message.tag,
            body=message.body.decode(),
        )
        if self.answer == "RAISE":
            raise RuntimeError("the checker failed on purpose")
        return {
            "COMMIT": TransactionResolution.COMMIT,
            "ROLLBACK": TransactionResolution.ROLLBACK,
            "UNKNOWN": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
        }[self.answer]


def message(args: argparse.Namespace, body: str) -> Message:
    msg = Message()
    msg.topic = args.topic
    msg.body = body.encode()
    if args.tag:
        msg.tag = args.tag
    msg.keys = (args.key or [f"key-{body}"])[0]
    msg.add_property("origin", "rmq-python")
    if args.message_group:
        msg.message_group = args.message_group
    if args.delay_seconds:
        msg.delivery_timestamp = int(time.time() + args.delay_seconds)
    return msg


def produce(args: argparse.Namespace, config: ClientConfiguration) -> None:
    producer = Producer(config, (args.topic,), checker=Checker(args.answer), tls_enable=args.tls)
    producer.startup()
    say(event="started", client_id=producer.client_id)
    try:
        for i in range(args.count):
            body = f"{args.body}-{i}" if args.count > 1 else args.body
            try:
                if args.scenario == "send":
                    receipt = producer.send(message(args, body))
                    say(event="sent", message_id=receipt.message_id, body=body, at=time.time())
                    continue
                transaction = producer.begin_transaction()
                receipt = producer.send(message(args, body), transaction)
                say(
                    event="half",
                    message_id=receipt.message_id,
                    transaction_id=receipt.transaction_id,
                    body=body,
                )
                if args.scenario == "commit":
                    transaction.commit()
                elif args.scenario == "rollback":
                    transaction.rollback()
                say(event=args.scenario, message_id=receipt.message_id)
            except Exception as exc:
                error(exc)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:  # orphans: the checker answers meanwhile
            time.sleep(0.2)
    finally:
        producer.shutdown()
        say(event="stopped")


def consume(args: argparse.Namespace, config: ClientConfiguration) -> None:
    expression = FilterExpression(args.expression)
    if args.sql:
        expression = FilterExpression(args.expression, FilterType.SQL)
    consumer = SimpleConsumer(
        config, args.group, {args.topic: expression}, await_duration=args.wait, tls_enable=args.tls
    )
    consumer.startup()
    say(event="started", client_id=consumer.client_id)
    received = 0
    deadline = time.monotonic() + args.seconds
    try:
        while received < args.count and time.monotonic() < deadline:
            try:
                messages = consumer.receive(args.batch, args.invisible)
            except Exception as exc:
                error(exc)
                time.sleep(0.5)
                continue
            for msg in messages:
                received += 1
                say(
                    event="received",
                    message_id=msg.message_id,
                    body=msg.body.decode(),
                    tag=msg.tag,
                    keys=sorted(msg.keys),
                    properties=dict(msg.properties),
                    message_group=msg.message_group,
                    delivery_attempt=msg.delivery_attempt,
                    corrupted=msg.corrupted,
                    received_at=time.time(),
                )
                if args.change_invisible:
                    consumer.change_invisible_duration(msg, args.change_invisible)
                    say(event="changed", message_id=msg.message_id)
                if args.ack:
                    consumer.ack(msg)
                    say(event="acked", message_id=msg.message_id)
    finally:
        consumer.shutdown()
        say(event="stopped")


def push(args: argparse.Namespace, config: ClientConfiguration) -> None:
    """A PushConsumer: its listener reports each message and answers SUCCESS (FAILURE for a
    body starting with ``fail``: the broker delivers it again)."""
    received = []

    class Listener(MessageListener):
        def consume(self, message: Message) -> ConsumeResult:
            received.append(message.message_id)
            say(
                event="received",
                message_id=message.message_id,
                body=message.body.decode(),
                tag=message.tag,
                delivery_attempt=message.delivery_attempt,
                corrupted=message.corrupted,
                received_at=time.time(),
            )
            if message.body.startswith(b"fail"):
                return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        config, args.group, Listener(), {args.topic: FilterExpression(args.expression)},
        tls_enable=args.tls,
    )  # fmt: skip
    consumer.startup()
    say(event="started", client_id=consumer.client_id)
    deadline = time.monotonic() + args.seconds
    try:
        while len(received) < args.count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # the last ack goes out
    finally:
        consumer.shutdown()
        say(event="stopped")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument(
        "scenario", choices=["send", "commit", "rollback", "orphan", "receive", "push"]
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="")
    parser.add_argument("--ak", default="")
    parser.add_argument("--sk", default="")
    parser.add_argument("--body", default="hello")
    parser.add_argument("--tag", default="")
    parser.add_argument("--key", action="append")
    parser.add_argument("--message-group", default="")
    parser.add_argument("--delay-seconds", type=float, default=0)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--answer", default="COMMIT")
    parser.add_argument("--seconds", type=float, default=0)
    parser.add_argument("--expression", default="*")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--invisible", type=int, default=30)
    parser.add_argument("--wait", type=int, default=2)
    parser.add_argument("--ack", action="store_true")
    parser.add_argument("--change-invisible", type=int, default=0)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--sql", action="store_true")
    args = parser.parse_args()
    config = ClientConfiguration(args.endpoint, Credentials(args.ak, args.sk), request_timeout=10)
    try:
        if args.scenario == "receive":
            consume(args, config)
        elif args.scenario == "push":
            push(args, config)
        else:
            produce(args, config)
    except Exception as exc:
        error(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
