"""Configuration as frozen value objects (as httpx's ``Timeout`` and ``Limits``)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx


@dataclass(frozen=True, slots=True)
class Timeout:
    """Seconds allowed for each phase of one HTTP request to a broker."""

    connect: float = 3.0
    read: float = 10.0
    write: float = 10.0
    pool: float = 10.0

    def to_httpx(self, *, extra_read: float = 0.0) -> httpx.Timeout:
        """``extra_read`` lengthens the read phase (a long-poll waits that much longer)."""
        return httpx.Timeout(
            connect=self.connect, read=self.read + extra_read, write=self.write, pool=self.pool
        )


@dataclass(frozen=True, slots=True)
class Retry:
    """How often and how patiently a request is tried again, on this broker or the next.

    A request is retried when no answer came (connection refused, time-out) or the broker shed load
    (429, 503) or failed (5xx).  Between attempts it waits ``backoff * multiplier**n`` seconds, at
    most ``max_backoff``.  Retrying is safe: every message has a client-made ``msg_id`` the broker
    deduplicates on, and repeating a commit or rollback answers the same.
    """

    attempts: int = 4
    backoff: float = 0.05
    multiplier: float = 2.0
    max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("Retry.attempts must be at least 1")

    def delay(self, failures: int) -> float:
        """The pause after the ``failures``-th failed attempt (1-based)."""
        return min(self.max_backoff, self.backoff * self.multiplier ** (failures - 1))


@dataclass(frozen=True, slots=True)
class CheckMode:
    """How this producer answers the broker's check-backs.

    ``pull`` (the default): a background long-poll fetches checks; no inbound port is needed.
    ``push``: the broker POSTs checks to ``callback_url`` (the producer's check router, mounted
    in the service, or its built-in server).  ``none``: this instance answers no checks.
    """

    kind: str = "pull"
    callback_url: str | None = None
    pull_wait_seconds: float = 5.0
    pull_max: int = 32
    workers: int = 4

    @classmethod
    def pull(
        cls, *, wait_seconds: float = 5.0, max_checks: int = 32, workers: int = 4
    ) -> CheckMode:
        return cls("pull", None, wait_seconds, max_checks, workers)

    @classmethod
    def push(cls, callback_url: str | None = None) -> CheckMode:
        """``callback_url`` may be left out when the built-in server is started (it knows its URL)."""
        return cls("push", callback_url)

    @classmethod
    def none(cls) -> CheckMode:
        return cls("none")
