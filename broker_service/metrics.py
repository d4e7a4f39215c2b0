"""Prometheus metrics, one registry per app (so tests can run several brokers in one process).

A low room of its own: the routes and the schedulers both count into it.  The counters are always
there; the latency histograms and the families read from the store at scrape time
(:class:`StoreReadings`) only with ``observe`` (the broker's ``metrics`` setting), so that a
broker can be run without their cost.  docs/observability.md lists every family."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# Fine steps over the milliseconds a send takes, coarse ones up to a receive's long poll (30 s).
REQUEST_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0)
# One group commit: an fsync (SQLite) or a round trip and a WAL flush (PostgreSQL), plus the units.
COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
COMMIT_UNIT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The consumer groups' backlog, as one read found it."""

    lags: Sequence[tuple[str, str, int, int]]  # (group, topic, queue id, messages)
    dead: Mapping[str, int]  # group -> messages in its DLQ
    retrying: Mapping[str, int]  # group -> retry copies not yet consumed


@dataclass(frozen=True, slots=True)
class Readings:
    """What one scrape read from the store; ``None``: that read failed (its families are absent)."""

    pending: Mapping[int, int] | None = None  # seconds -> PREPARED halves at least that old
    undelivered: int | None = None
    backlog: Backlog | None = None


class StoreReadings(Collector):
    """The families read from the store at scrape time.  The /metrics route reads the store and
    sets :attr:`latest` just before it renders; a read that failed leaves its families out, so a
    store that cannot be read never shows as a zero lag (``halfmq_consumer_lag_readable`` 0)."""

    def __init__(self) -> None:
        self.latest = Readings()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families(Readings())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families(self.latest)

    @staticmethod
    def _families(now: Readings) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "halfmq_pending_halves",
            "PREPARED halves at least this old (seconds), read from the store at scrape time",
            labels=["older_than_seconds"],
        )
        for age, count in (now.pending or {}).items():
            pending.add_metric([str(age)], count)
        undelivered = GaugeMetricFamily(
            "halfmq_undelivered_halves",
            "Open halves whose checks have reached no producer instance for at least "
            "check_undelivered_alert_seconds (never discarded for it; see last_check_error)",
        )
        if now.undelivered is not None:
            undelivered.add_metric([], now.undelivered)
        lag = GaugeMetricFamily(
            "halfmq_consumer_lag_messages",
            "Messages a consumer group has not consumed, per subscribed topic and queue: the "
            "queue's max offset minus the group's committed offset (broadcasting: the least "
            "advanced live member; no offset yet: minus where a receive would start it)",
            labels=["group", "topic", "queue"],
        )
        readable = GaugeMetricFamily(
            "halfmq_consumer_lag_readable",
            "1 when this scrape read the consumer groups' lag, DLQ and retry depths from the "
            "store; 0 when it could not, and those series are absent",
        )
        readable.add_metric([], 0 if now.backlog is None else 1)
        dead = GaugeMetricFamily(
            "halfmq_dlq_messages",
            "Messages in a consumer group's dead-letter queue, not resent",
            labels=["group"],
        )
        retrying = GaugeMetricFamily(
            "halfmq_retry_messages",
            "Retry copies released into a consumer group's retry topic, not yet consumed",
            labels=["group"],
        )
        if now.backlog is not None:
            for group, topic, queue_id, messages in now.backlog.lags:
                lag.add_metric([group, topic, str(queue_id)], messages)
            for group, count in now.backlog.dead.items():
                dead.add_metric([group], count)
            for group, count in now.backlog.retrying.items():
                retrying.add_metric([group], count)
        yield from (pending, undelivered, lag, readable, dead, retrying)


class BrokerMetrics:
    def __init__(self, *, observe: bool = True) -> None:
        """``observe``: export the latency histograms and read the store at scrape time."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.observe = observe
        observed = self.registry if observe else None  # off: made (observable), never exported
        self.messages_sent = Counter(
            "halfmq_messages_sent",
            "Messages stored by sends (batch members counted one by one)",
            ["duplicate"],
            registry=self.registry,
        )
        for duplicate in ("true", "false"):  # both series from the start, even at 0
            self.messages_sent.labels(duplicate=duplicate)
        self.halves = Counter(
            "halfmq_half_messages", "Half messages stored", registry=self.registry
        )
        self.resolutions = Counter(
            "halfmq_transactions_resolved",
            "Commit and rollback decisions applied, by state and by whom",
            ["state", "by"],
            registry=self.registry,
        )
        self.heartbeats = Counter(
            "halfmq_producer_heartbeats", "Producer heartbeats", registry=self.registry
        )
        self.store_batches = Gauge(
            "halfmq_store_commits",
            "Store commits made by the group-commit writer",
            registry=self.registry,
        )
        self.store_units = Gauge(
            "halfmq_store_units",
            "Units of work committed (units / commits = mean group-commit size)",
            registry=self.registry,
        )
        self.checks = Counter(
            "halfmq_checks",
            "Check-back events: sent; answered, failed (received without an answer: an error "
            "status or a time-out after sending; counted); undelivered (reached nobody: not "
            "counted), redirected (to another instance in the same round); assigned_pull, "
            "pulled; skipped_no_producer, skipped_unreachable (no live, or no reachable, "
            "instance: not counted)",
            ["outcome"],
            registry=self.registry,
        )
        self.discards = Counter(
            "halfmq_transactions_discarded",
            "Halves parked as DISCARDED, by reason (CHECK_MAX, TOPIC_DELETED, HALF_MISSING)",
            ["reason"],
            registry=self.registry,
        )
        self.ready = Gauge(
            "halfmq_ready",
            "1 when the store is reachable and its schema current",
            registry=self.registry,
        )
        self.consumer_messages = Counter(
            "halfmq_consumer_messages",
            "Consumer-group events by outcome: delivered, acked, stale_ack, retry, "
            "retry_in_place (orderly), dlq, resent",
            ["outcome"],
            registry=self.registry,
        )
        self.receive_wait = Counter(
            "halfmq_receives",
            "Receives by result: messages (answered with some) or empty (after any long poll)",
            ["result"],
            registry=self.registry,
        )
        self.purged_rows = Counter(
            "halfmq_retention_purged_rows",
            "Rows the purge deleted, by table",
            ["table"],
            registry=self.registry,
        )
        self.expired_messages = Counter(
            "halfmq_retention_expired_messages",
            "Messages purged before a consumer group passed them (hard limit), by group",
            ["group"],
            registry=self.registry,
        )
        self.purge_rounds = Counter(
            "halfmq_retention_rounds",
            "Purge rounds by result: purged, idle, lease_held (another broker purges), failed",
            ["result"],
            registry=self.registry,
        )
        self.oldest_message_age = Gauge(
            "halfmq_retention_oldest_message_age_seconds",
            "Age of the oldest message still stored in a user, retry or DLQ topic (at the last "
            "purge round)",
            registry=self.registry,
        )
        self.store_size = Gauge(
            "halfmq_store_size_bytes",
            "Size of the store's tables and indexes (SQLite: the file; at the last purge round)",
            registry=self.registry,
        )
        self.check_seconds = Histogram(
            "halfmq_check_seconds",
            "Check-backs from sending to the answer, by mode (push, pull) and result (COMMIT, "
            "ROLLBACK, UNKNOWN; timeout, refused, error)",
            ["mode", "result"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=observed,
        )
        self.audit_actions = Counter(
            "halfmq_audit_actions",
            "Operator actions written to the audit log, by action and result (ok, refused, failed)",
            ["action", "result"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "halfmq_request_seconds",
            "HTTP requests from the first byte read to the last byte sent, by method, route (the "
            "route's path template; 'unmatched' for a path no route serves) and status class",
            ["method", "route", "status_class"],
            buckets=REQUEST_BUCKETS,
            registry=observed,
        )
        self.grpc_seconds = Histogram(
            "halfmq_grpc_seconds",
            "RPCs of the RocketMQ 5 gRPC port, from the request read to the answer built, by RPC "
            "and the Code its status answered (OK, FORBIDDEN, MESSAGE_NOT_FOUND, ...)",
            ["rpc", "code"],
            buckets=REQUEST_BUCKETS,
            registry=observed,
        )
        self.grpc_streams = Gauge(
            "halfmq_grpc_streams",
            "Telemetry streams this broker holds, by client type (PRODUCER, SIMPLE_CONSUMER, "
            "PUSH_CONSUMER; UNSET before the client's Settings)",
            ["client_type"],
            registry=self.registry,
        )
        self.store_commit_seconds = Histogram(
            "halfmq_store_commit_seconds",
            "Group commits of the store's writer: one store transaction, from its begin to its "
            "commit",
            buckets=COMMIT_BUCKETS,
            registry=observed,
        )
        self.store_commit_units = Histogram(
            "halfmq_store_commit_units",
            "Units of work (requests) one group commit carried",
            buckets=COMMIT_UNIT_BUCKETS,
            registry=observed,
        )
        self.readings = StoreReadings()
        if observe:
            self.registry.register(self.readings)

    def count_receive(self, delivered: int) -> None:
        """A receive's counts, whatever the protocol: whether it found messages (or waited in
        vain), and how many."""
        self.receive_wait.labels(result="messages" if delivered else "empty").inc()
        self.consumer_messages.labels(outcome="delivered").inc(delivered)

    def count_ack(self, acked: int, stale: int) -> None:
        """An ack's counts, whatever the protocol: the messages acked, and the stale handles
        that acked nothing."""
        self.consumer_messages.labels(outcome="acked").inc(acked)
        self.consumer_messages.labels(outcome="stale_ack").inc(stale)

    def count_resolution(
        self, state: str, by: str, decision: str, pull_latency_ms: int | None
    ) -> None:
        """A commit's or rollback's counts, whatever the protocol: the decision applied (its
        final ``state``, decided ``by``) and, for a pull instance's answer to its check, the time
        since it took the check."""
        self.resolutions.labels(state=state, by=by).inc()
        if pull_latency_ms is not None:
            seconds = pull_latency_ms / 1000
            self.check_seconds.labels(mode="pull", result=decision).observe(seconds)

    def observe_commit(self, seconds: float, units: int) -> None:
        """The store writer's hook, called from its thread after each commit."""
        self.store_commit_seconds.observe(seconds)
        self.store_commit_units.observe(units)
