"""The broker and the two banks as real processes on loopback, with the demo's short settings and
the ACL on: the broker reads this run's ``plain_acl.yml`` (:mod:`demo_bank.acl`), each bank signs
with its own keys from its environment, and the runner's own requests sign as the operator."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import httpx

from demo_bank.acl import DemoKeys, bank_env, new_keys, signed_client, write_acl
from demo_bank.plan import FLAKY_PERCENT
from demo_bank.processes import (
    Service,
    ServiceError,
    bank_service,
    broker_service,
    free_port,
    stop_all,
)
from demo_bank.settings import BOB_GROUP, SMITH_GROUP, TOPIC, BankSettings
from demo_bank.stores import Stores
from framework.signing import Credentials

# Retry k of a consumer waits delay level 3 + k: 300 ms, 400 ms, ... (RocketMQ's: 10 s, 30 s, ...)
DELAY_LEVELS = " ".join([*(f"{100 * n}ms" for n in range(1, 10)), *(["1s"] * 9)])
BROKER_SETTINGS = {
    "transaction_timeout_seconds": "1",
    "transaction_check_interval_seconds": "0.5",
    "producer_expiry_seconds": "3",
    "message_delay_level": DELAY_LEVELS,
    "receive_poll_seconds": "0.2",
    "log_level": "info",  # broker.log: start, settings, check rounds, discards, faults
}


CLIENTS = ("halfmq", "rocketmq")
RMQ_PRODUCER_EXPIRY = "15"  # seconds; RocketMQ's Python client heartbeats every 10 s


@dataclass
class Cluster:
    broker: Service
    bob: Service
    smith: Service
    keys: DemoKeys
    clients: str = "halfmq"  # halfmq (the framework, REST) | rocketmq (RocketMQ's client, gRPC)

    def operator(self, timeout: float = 10) -> httpx.Client:
        """A client on the broker that signs as the operator (an admin account)."""
        return signed_client(self.broker.url, self.keys.operator, timeout)

    @property
    def services(self) -> tuple[Service, ...]:
        return (self.broker, self.bob, self.smith)

    def start(self) -> None:
        self.broker.start()
        with self.operator() as client:
            client.post("/v1/topics", json={"name": TOPIC, "queues": 4}).raise_for_status()
            if self.clients == "rocketmq":
                # A RocketMQ consumer's group is made on its first subscription, at the end of
                # the topic; made here, it starts at the beginning with Smith's retry count.
                group = {"name": SMITH_GROUP, "consume_from": "FIRST_OFFSET",
                         "max_reconsume_times": BankSettings().max_reconsume_times}  # fmt: skip
                client.post("/v1/consumer-groups", json=group).raise_for_status()
        errors: list[ServiceError] = []

        def start(service: Service) -> None:
            try:
                service.start()
            except ServiceError as exc:
                errors.append(exc)

        banks = [threading.Thread(target=start, args=(s,)) for s in (self.bob, self.smith)]
        for thread in banks:
            thread.start()
        for thread in banks:
            thread.join()
        if errors:
            raise errors[0]

    def stop(self) -> None:
        """Every process this run started, by PID: the banks (at once), then the broker."""
        stop_all([self.bob, self.smith])
        stop_all([self.broker])


def make_cluster(
    stores: Stores, folder: Path, seed: int, faults: bool, clients: str = "halfmq"
) -> Cluster:
    """The three services, not started; writes ``folder/plain_acl.yml`` with fresh keys.
    ``clients="rocketmq"``: the broker also serves gRPC on loopback, Bob's gRPC producer is put
    in group ``bob-bank`` (``grpc_producer_groups``: the same ACL entry and check-backs as
    REST), and each bank runs on RocketMQ's Python client with its own ``HOME`` in ``folder``
    (the client writes its logs under ``~/logs``)."""
    if clients not in CLIENTS:
        raise ValueError(f"--clients is halfmq or rocketmq, not {clients!r}")
    keys = new_keys()
    acl_file = write_acl(folder, keys)
    broker_port = free_port()
    broker_url = f"http://127.0.0.1:{broker_port}"
    settings = {**BROKER_SETTINGS, "acl_file": str(acl_file)}
    grpc: dict[str, str] = {}
    if clients == "rocketmq":
        grpc_port = free_port()
        settings |= {
            "grpc_port": str(grpc_port),
            "grpc_producer_groups": f"{TOPIC}={BOB_GROUP}",
            # The Python client heartbeats every 10 s: a shorter expiry would let Bob's instance
            # lapse between heartbeats and hold his checks up (a killed Bob's stream closes, and
            # that sets him aside at once).
            "producer_expiry_seconds": RMQ_PRODUCER_EXPIRY,
        }
        grpc = {"DEMO_BANK_CLIENTS": clients, "DEMO_BANK_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}"}
    broker = broker_service(stores.broker, broker_port, folder / "broker.log", settings)

    def env(bank: str, database_url: str, credentials: Credentials) -> dict[str, str]:
        home: dict[str, str] = {}
        if grpc:
            (folder / "rocketmq-home" / bank).mkdir(parents=True, exist_ok=True)
            home = {"HOME": str((folder / "rocketmq-home" / bank).resolve())}
        return {
            **bank_env(credentials),
            **grpc,
            **home,
            "DEMO_BANK_DATABASE_URL": database_url,
            "DEMO_BANK_BROKER": broker_url,
            "DEMO_BANK_FAULTS": "true" if faults else "false",
            "DEMO_BANK_FLAKY_PERCENT": str(FLAKY_PERCENT if faults else 0),
            "DEMO_BANK_SEED": str(seed),
        }

    bob_env, smith_env = env("bob", stores.bob, keys.bob), env("smith", stores.smith, keys.smith)
    bob = bank_service("bob", free_port(), folder / "bob.log", bob_env)
    smith = bank_service("smith", free_port(), folder / "smith.log", smith_env)
    return Cluster(broker, bob, smith, keys, clients)
