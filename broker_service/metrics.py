"""Prometheus metrics, one registry per app (so tests can run several brokers in one process).

A low room of its own: the routes and the schedulers both count into it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
        self.pending = Gauge(
            "halfmq_pending_halves",
            "PREPARED halves at least this old (seconds), read from the store at scrape time",
            ["older_than_seconds"],
            registry=self.registry,
        )
        self.undelivered = Gauge(
            "halfmq_undelivered_halves",
            "Open halves whose checks have reached no producer instance for at least "
            "check_undelivered_alert_seconds (never discarded for it; see last_check_error)",
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
