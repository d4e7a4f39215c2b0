"""The broker's one schema, for SQLite and PostgreSQL alike.

RocketMQ's model is kept: every message -- user messages, half messages, op records, retry and
dead-letter copies, delayed messages waiting for their time -- is a row of ``messages`` in some topic
and queue, at a dense, gap-free ``queue_offset`` of that queue.  What RocketMQ keeps in its commit log,
consume queues and index files is here one table plus two index tables:

* ``messages``        the commit log and consume queues (``id`` is the commit-log order);
* ``message_keys``    the key index behind ``GET /v1/messages?key=`` (RocketMQ's IndexFile);
* ``transactions``    one row per half message: the index that makes a check-back round a lookup of
                      the due halves (state, ``check_times``, ``next_check_at``, the claim) instead of
                      RocketMQ's scan of half offsets against the op set.  The half itself and its op
                      record stay ordinary messages of ``RMQ_SYS_TRANS_HALF_TOPIC`` and
                      ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, so the reconciliation job can compare them.

Times are epoch milliseconds (``BIGINT``) from the broker's clock; bodies are raw bytes.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only makes INTEGER PRIMARY KEY an alias of its rowid (fast, monotonic).
BigId = BigInteger().with_variant(Integer(), "sqlite")
Millis = BigInteger


def partial_index(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """An index of only the rows ``where`` holds, on SQLite and PostgreSQL alike."""
    return Index(
        name, *columns, unique=unique, sqlite_where=text(where), postgresql_where=text(where)
    )


topics = Table(
    "topics",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("queues", Integer, nullable=False),
    Column("ordered", Boolean, nullable=False, server_default=text("false")),
    # perm as RocketMQ: 6 = read + write; 2 = write only; 4 = read only.
    Column("perm", Integer, nullable=False, server_default=text("6")),
    Column("system", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", Millis, nullable=False),
)

queues = Table(
    "queues",
    metadata,
    Column("topic", String(255), nullable=False),
    Column("queue_id", Integer, nullable=False),
    # The offset the next message of this queue gets (RocketMQ's max offset).
    Column("next_offset", BigInteger, nullable=False, server_default=text("0")),
    # The smallest offset still stored (raised by retention).
    Column("min_offset", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("topic", "queue_id"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("topic", String(255), nullable=False),
    Column("queue_id", Integer, nullable=False),
    Column("queue_offset", BigInteger, nullable=False),
    Column("msg_id", String(128), nullable=False),
    # The producer's msg_id for messages a client sent (normal sends and halves): unique, the
    # retransmit dedup.  NULL for copies the broker makes (real message of a commit, op records,
    # retry and DLQ copies, released delayed messages).
    Column("dedup_key", String(128), nullable=True),
    Column("content_hash", String(64), nullable=True),
    Column("body", LargeBinary, nullable=False),
    Column("encoding", String(16), nullable=False),
    Column("tags", String(128), nullable=True),
    Column("keys", Text, nullable=True),  # JSON array of strings
    Column("properties", Text, nullable=True),  # JSON object of strings
    Column("sharding_key", String(255), nullable=True),
    Column("transaction_id", String(64), nullable=True),
    Column("producer_group", String(255), nullable=True),
    Column("born_at", Millis, nullable=False),
    Column("stored_at", Millis, nullable=False),
    # When a delayed message becomes deliverable (messages parked in SCHEDULE_TOPIC_XXXX, retry copies).
    Column("deliver_at", Millis, nullable=True),
    # When a delayed message was moved into its real topic (NULL while it waits).
    Column("released_at", Millis, nullable=True),
    Column("reconsume_times", Integer, nullable=False, server_default=text("0")),
    # Set on broker-made copies: the id (commit-log position) of the message it copies.
    Column("origin_id", BigInteger, nullable=True),
    UniqueConstraint("topic", "queue_id", "queue_offset"),
    Index("ix_messages_msg_id", "msg_id"),
    # Partial: most messages have neither, and every index costs each insert.
    partial_index("uq_messages_dedup_key", "dedup_key", where="dedup_key IS NOT NULL", unique=True),
    partial_index(
        "ix_messages_transaction_id", "transaction_id", where="transaction_id IS NOT NULL"
    ),
    Index("ix_messages_stored_at", "stored_at"),
    # Delayed messages still waiting: the release scheduler's lookup.
    partial_index(
        "ix_messages_due",
        "topic",
        "deliver_at",
        where="released_at IS NULL AND deliver_at IS NOT NULL",
    ),
)

message_keys = Table(
    "message_keys",
    metadata,
    Column("key", String(128), nullable=False),
    Column("stored_at", Millis, nullable=False),
    Column("topic", String(255), nullable=False),
    Column("queue_id", Integer, nullable=False),
    Column("queue_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("key", "stored_at", "topic", "queue_id", "queue_offset"),
    # The purge drops the key rows of the messages it drops, by position.
    Index("ix_message_keys_topic_queue_id_queue_offset", "topic", "queue_id", "queue_offset"),
)

transactions = Table(
    "transactions",
    metadata,
    Column("transaction_id", String(64), primary_key=True),
    Column("msg_id", String(128), nullable=False),
    Column("producer_group", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    # Where the half is: queue 0 of RMQ_SYS_TRANS_HALF_TOPIC at this offset.
    Column("half_offset", BigInteger, nullable=False),
    # PREPARED | COMMITTED | ROLLED_BACK | DISCARDED
    Column("state", String(16), nullable=False),
    Column("check_times", Integer, nullable=False, server_default=text("0")),
    Column("check_immunity_ms", BigInteger, nullable=True),
    Column("created_at", Millis, nullable=False),
    # When the check-back scheduler should look at this half next; NULL once resolved.
    Column("next_check_at", Millis, nullable=True),
    # Which broker holds the check in flight, until when (claims live in the database).
    Column("claimed_by", String(128), nullable=True),
    Column("claimed_until", Millis, nullable=True),
    Column("last_checked_at", Millis, nullable=True),
    # The producer instance the current check went to, and whether it still waits to be pulled.
    Column("check_client_id", String(255), nullable=True),
    Column("check_pending_pull", Boolean, nullable=False, server_default=text("false")),
    Column("discard_reason", String(64), nullable=True),
    Column("resolved_at", Millis, nullable=True),
    Column("resolved_by", String(16), nullable=True),  # producer | check | operator
    # The producer instance (its client_id) whose commit or rollback named it; NULL otherwise.
    Column("resolved_client", String(255), nullable=True),
    # The queue of the real topic the message goes to on commit (chosen when the half is sent).
    Column("real_queue_id", Integer, nullable=False),
    Column("discarded_at", Millis, nullable=True),
    # The last check that went wrong (not delivered, or an error answer) and since when checks
    # have failed to reach any instance (NULL once one is delivered): reported, never counted.
    Column("last_check_error", Text, nullable=True),
    Column("last_check_error_at", Millis, nullable=True),
    Column("undelivered_since", Millis, nullable=True),
    Index("ix_transactions_next_check_at", "next_check_at"),
    Index("ix_transactions_state_created", "state", "created_at"),
    Index("ix_transactions_group_state", "producer_group", "state"),
    Index("ix_transactions_msg_id", "msg_id"),
    Index("ix_transactions_pull", "producer_group", "check_client_id"),
    partial_index(
        "ix_transactions_undelivered", "undelivered_since", where="undelivered_since IS NOT NULL"
    ),
)

producers = Table(
    "producers",
    metadata,
    Column("producer_group", String(255), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("callback_url", Text, nullable=True),
    Column("topics", Text, nullable=True),  # JSON array: topics the instance declared
    Column("last_heartbeat_at", Millis, nullable=False),
    # A check could not be delivered to this instance: it gets none until then (and why).
    Column("unreachable_until", Millis, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("last_error_at", Millis, nullable=True),
    # The access key its heartbeat was signed with (ACL on): push checks are signed with its secret.
    Column("access_key", String(128), nullable=True),
    PrimaryKeyConstraint("producer_group", "client_id"),
    Index("ix_producers_heartbeat", "producer_group", "last_heartbeat_at"),
)

consumer_groups = Table(
    "consumer_groups",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("message_model", String(16), nullable=False),  # CLUSTERING | BROADCASTING
    Column("consume_from", String(16), nullable=False),  # FIRST_OFFSET | LAST_OFFSET | TIMESTAMP
    Column("consume_timestamp", Millis, nullable=True),
    Column("max_reconsume_times", Integer, nullable=True),
    Column("orderly", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", Millis, nullable=False),
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("consumer_group", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("expression", String(1024), nullable=False),
    Column("created_at", Millis, nullable=False),
    PrimaryKeyConstraint("consumer_group", "topic"),
)

consumers = Table(
    "consumers",
    metadata,
    Column("consumer_group", String(255), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("last_seen_at", Millis, nullable=False),
    PrimaryKeyConstraint("consumer_group", "client_id"),
)

# Committed consume progress.  client_id is '' for clustering groups (one offset per queue for the
# group) and the member's id for broadcasting groups (each member its own offsets).
consumer_offsets = Table(
    "consumer_offsets",
    metadata,
    Column("consumer_group", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("queue_id", Integer, nullable=False),
    Column("client_id", String(255), nullable=False, server_default=text("''")),
    Column("committed_offset", BigInteger, nullable=False),
    Column("updated_at", Millis, nullable=False),
    # The next offset never handed out to the group (RocketMQ POP's pull offset): offsets between
    # committed_offset and pulled_offset are in flight, acked out of order or filtered out by tag.
    Column("pulled_offset", BigInteger, nullable=False, server_default=text("0")),
    # Messages retention purged before the group (or member) passed them: past the hard limit,
    # or a broadcasting member not seen for the whole retention (counted, logged, never silent).
    Column("expired", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("consumer_group", "topic", "queue_id", "client_id"),
)

# A delivery still open: in flight, or an orderly retry waiting at its queue's head.
OPEN_DELIVERY = "state IN ('INFLIGHT', 'RETRYING')"

# One row per hand-out of a message to a member: the in-flight lease and, once acked, the
# delivery record the reconciliation reads.
deliveries = Table(
    "deliveries",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("consumer_group", String(255), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("queue_id", Integer, nullable=False),
    Column("queue_offset", BigInteger, nullable=False),
    Column("msg_id", String(128), nullable=False),
    Column("receipt_handle", String(128), nullable=False),
    # INFLIGHT | RETRYING (orderly) | ACKED | NACKED | EXPIRED | DEAD
    Column("state", String(16), nullable=False),
    Column("reconsume_times", Integer, nullable=False, server_default=text("0")),
    Column("delivered_at", Millis, nullable=False),
    Column("invisible_until", Millis, nullable=False),
    Column("finished_at", Millis, nullable=True),
    UniqueConstraint("receipt_handle"),
    Index("ix_deliveries_msg_id", "msg_id"),
    # Partial: only open deliveries.  The oldest open offset of a queue is its committed offset;
    # due ones are handed out again.
    partial_index(
        "ix_deliveries_open",
        "consumer_group",
        "topic",
        "queue_id",
        "queue_offset",
        where=OPEN_DELIVERY,
    ),
    partial_index("ix_deliveries_due", "consumer_group", "invisible_until", where=OPEN_DELIVERY),
)

# Events the rows themselves do not record (checks sent and answered, operator actions, resends).
trace_events = Table(
    "trace_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("msg_id", String(128), nullable=False),
    Column("transaction_id", String(64), nullable=True),
    Column("at", Millis, nullable=False),
    Column("event", String(32), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("detail", Text, nullable=True),  # JSON object
    Index("ix_trace_events_msg_id", "msg_id"),
)

# How far an exporter (the reconciliation export) has read each table: retention never purges a
# row past the watermark of an exporter that has not yet read it.
export_watermarks = Table(
    "export_watermarks",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("last_message_id", BigInteger, nullable=False, server_default=text("0")),
    Column("exported_until", Millis, nullable=False, server_default=text("0")),
    Column("updated_at", Millis, nullable=False),
)

# The ACL (broker_service.acl): nonces of signed requests seen inside the timestamp window, kept
# in the store so that a request replayed to another broker on the same database is refused.
acl_nonces = Table(
    "acl_nonces",
    metadata,
    Column("signed_at", Millis, nullable=False),
    Column("access_key", String(128), nullable=False),
    Column("nonce", String(128), nullable=False),
    PrimaryKeyConstraint("signed_at", "access_key", "nonce"),
    sqlite_with_rowid=False,
)

# Every ACL version a broker published (from its file, or from `halfmq acl`): each broker enforces
# the newest, so brokers sharing a database converge on one version.
acl_versions = Table(
    "acl_versions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("version", String(64), nullable=False),
    Column("content", Text, nullable=False),  # the plain_acl.yml text (it holds secrets)
    Column("published_at", Millis, nullable=False),
    Column("published_by", String(128), nullable=False),
)

# Retention (broker_service.store.retention): one 64-bit hash of each purged msg_id and
# transaction id, so that a lookup of a purged id answers "expired", not "never existed".  Kept
# for as long again as the retention; a hash is 8 bytes where the row it stands for was hundreds.
purged_ids = Table(
    "purged_ids",
    metadata,
    Column("id_hash", BigInteger, nullable=False),
    Column("purged_at", Millis, nullable=False),
    PrimaryKeyConstraint("id_hash"),
    Index("ix_purged_ids_purged_at", "purged_at"),
    sqlite_with_rowid=False,
)

# Background work that one broker of several sharing a database runs at a time (the purge): the
# holder renews ``until`` in every transaction of its work, so a broker that lost the lease
# (paused past ``until``) finds out before it changes anything.
leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("until", Millis, nullable=False),
)

# The console's audit log (broker_service.domain.audit): who did what by hand, when, and how it
# ended.  Not purged by retention: a few rows per operator action, asked about long after.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", Millis, nullable=False),
    Column("access_key", String(128), nullable=False),  # "anonymous" with the ACL off
    Column("action", String(64), nullable=False),
    Column("subject", String(512), nullable=False),
    Column("detail", Text, nullable=True),  # JSON object
    Column("result", String(16), nullable=False),  # ok | refused | failed
    Index("ix_audit_log_subject_id", "subject", "id"),
)

# The brokers sharing this store (broker_service.domain.brokers): each upserts its row when it
# starts and at every presence beat; a row not seen for a day is deleted by the others' beats.
brokers = Table(
    "brokers",
    metadata,
    Column("broker_id", String(128), primary_key=True),
    Column("address", String(255), nullable=False),  # host:port it listens on
    Column("version", String(64), nullable=False),
    Column("store_kind", String(16), nullable=False),  # sqlite | postgresql
    Column("started_at", Millis, nullable=False),
    Column("last_seen_at", Millis, nullable=False),
    Column("grpc_address", String(255), nullable=True),  # host:port of its gRPC listener, if any
)

# Each RocketMQ 5 gRPC client by its id (broker_service.domain.clients): what it says it is, for
# the console and the trace, and the Settings it last wrote down its Telemetry stream (serialized
# protobuf, opaque to the store): a stream that reopens under the same client id, on any broker
# sharing the store, is registered with them at once.
grpc_clients = Table(
    "grpc_clients",
    metadata,
    Column("client_id", String(255), primary_key=True),
    Column("access_key", String(128), nullable=True),
    Column("language", String(32), nullable=False),  # PYTHON, JAVA, NODE_JS, ...
    Column("client_version", String(64), nullable=False),
    Column("settings", LargeBinary, nullable=False),
    Column("updated_at", Millis, nullable=False),
)

# The operators' word on each break of the nightly reconciliation (spark_reconcile.breaks), by
# the job's break id: set in the console (open, acknowledged, explained with a note, resolved by
# hand), read by the next runs of the job (or its export), which carry it into their reports.
reconcile_break_statuses = Table(
    "reconcile_break_statuses",
    metadata,
    Column("break_id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),  # open | acknowledged | explained | resolved
    Column("note", Text, nullable=True),
    Column("kind", String(64), nullable=True),  # the break's kind when the status was set
    Column("report", String(128), nullable=True),  # the report it was set from (date=YYYY-MM-DD)
    Column("actor", String(128), nullable=True),  # the access key (None with the ACL off)
    Column("updated_at", Millis, nullable=False),
)
