"""RocketMQ's official Python client on halfmq's gRPC port against halfmq's framework on its REST
API, same broker, one run.

    python bench/grpc_bench.py [--seconds 3] [--threads 8] [--store sqlite|postgresql]

It starts one real broker process with ``--grpc-port`` and measures, on N threads each:

* sends/s: ``Producer.send`` of the unmodified ``rocketmq-python-client`` (one NORMAL message a
  call) vs ``TransactionProducer.send`` of the framework (one ``POST /v1/topics/{t}/messages``);
* transactions/s: ``begin_transaction`` + ``send`` + ``commit`` (SendMessage then EndTransaction)
  vs ``send_message_in_transaction`` with a local transaction that answers COMMIT_MESSAGE (a
  half, then its commit).

gRPC and REST runs alternate and each figure is the median of its rounds; the ratios gRPC / REST
are printed last.  The target: gRPC transactions at least 0.8 of REST transactions.  The Python
client writes its logs under ``~/logs``: HOME is a temporary folder for the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import free_port, start_broker

from framework import LocalTransactionState, Message, TransactionProducer

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ROUNDS = 3
TOPIC = "grpc-bench"


def rate(work: Callable[[], None], threads: int, seconds: float) -> float:
    """Operations per second of ``work`` called in a loop on ``threads`` threads."""
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def loop(index: int) -> None:
        while time.monotonic() < stop:
            work()
            counts[index] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.monotonic() - started)


def rocketmq_side(
    endpoint: str,
) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """The official client's send and transaction, and its shutdown."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )
    from rocketmq import Message as RmqMessage

    class Commit(TransactionChecker):
        def check(self, message: RmqMessage) -> TransactionResolution:
            return TransactionResolution.COMMIT

    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (TOPIC,), checker=Commit())
    producer.startup()

    def message() -> RmqMessage:
        built = RmqMessage()
        built.topic = TOPIC
        built.body = b'{"amount": 100}'
        return built

    def send() -> None:
        producer.send(message())

    def transaction() -> None:
        begun = producer.begin_transaction()
        producer.send(message(), begun)
        begun.commit()

    return send, transaction, producer.shutdown


def framework_side(url: str) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    producer = TransactionProducer("grpc-bench-rest", brokers=[url])

    @producer.execute_local_transaction(TOPIC)
    def commit(message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    producer.start()

    def send() -> None:
        producer.send(Message(TOPIC, body='{"amount": 100}'))

    def transaction() -> None:
        producer.send_message_in_transaction(Message(TOPIC, body='{"amount": 100}'), arg=None)

    return send, transaction, producer.shutdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as folder:
        os.environ["HOME"] = folder  # before the client is imported: its logs go here
        url = f"sqlite:///{folder}/broker.db" if args.store == "sqlite" else PG
        port, grpc_port = free_port(), free_port()
        broker = start_broker(
            url, port, Path(folder) / "broker.log", extra=["--grpc-port", str(grpc_port)]
        )
        try:
            base = f"http://127.0.0.1:{port}"
            httpx.post(f"{base}/v1/topics", json={"name": TOPIC, "queues": 8})
            sides = {
                "gRPC": rocketmq_side(f"127.0.0.1:{grpc_port}"),
                "REST": framework_side(base),
            }
            figures: dict[tuple[str, str], list[float]] = {}
            for _ in range(ROUNDS):
                for side, (send, transaction, _stop) in sides.items():
                    for what, work in (("sends/s", send), ("transactions/s", transaction)):
                        figure = rate(work, args.threads, args.seconds)
                        figures.setdefault((side, what), []).append(figure)
            for _side, (_send, _transaction, stop) in sides.items():
                stop()
        finally:
            broker.terminate()
            broker.wait(timeout=30)
    print(
        f"store {args.store}, {args.threads} threads, {args.seconds:g} s a run, median of {ROUNDS}"
    )
    for what in ("sends/s", "transactions/s"):
        grpc = statistics.median(figures[("gRPC", what)])
        rest = statistics.median(figures[("REST", what)])
        print(f"{what:>15}: gRPC {grpc:8.0f}   REST {rest:8.0f}   gRPC/REST {grpc / rest:.2f}")


if __name__ == "__main__":
    main()
