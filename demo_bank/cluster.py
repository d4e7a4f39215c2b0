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
from demo_bank.settings import TOPIC
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


@dataclass
class Cluster:
    broker: Service
    bob: Service
    smith: Service
    keys: DemoKeys

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


def make_cluster(stores: Stores, folder: Path, seed: int, faults: bool) -> Cluster:
    """The three services, not started; writes ``folder/plain_acl.yml`` with fresh keys."""
    keys = new_keys()
    acl_file = write_acl(folder, keys)
    broker_port = free_port()
    broker_url = f"http://127.0.0.1:{broker_port}"
    settings = {**BROKER_SETTINGS, "acl_file": str(acl_file)}
    broker = broker_service(stores.broker, broker_port, folder / "broker.log", settings)

    def env(database_url: str, credentials: Credentials) -> dict[str, str]:
        return {
            **bank_env(credentials),
            "DEMO_BANK_DATABASE_URL": database_url,
            "DEMO_BANK_BROKER": broker_url,
            "DEMO_BANK_FAULTS": "true" if faults else "false",
            "DEMO_BANK_FLAKY_PERCENT": str(FLAKY_PERCENT if faults else 0),
            "DEMO_BANK_SEED": str(seed),
        }

    bob = bank_service("bob", free_port(), folder / "bob.log", env(stores.bob, keys.bob))
    smith = bank_service("smith", free_port(), folder / "smith.log", env(stores.smith, keys.smith))
    return Cluster(broker, bob, smith, keys)
