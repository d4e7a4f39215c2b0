"""Broker settings: one pydantic-settings model.

Each setting can be given as an environment variable ``HALFMQ_<NAME>``, a key of a config file (YAML,
TOML or JSON, ``--config``) or a ``halfmq broker serve --<name>`` flag; the flag wins over the file and
the file over the environment.  Nothing here is read at import time: entry points build the object.
"""

from __future__ import annotations

import json
import os
import socket
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from broker_service.domain.config import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_MAX_DELAY_SECONDS,
    CheckPolicy,
    ConsumerConfig,
    DomainConfig,
    RetentionPolicy,
    parse_delay_levels,
)
from broker_service.domain.transactions.callbacks import parse_ports


class Flush(StrEnum):
    """RocketMQ's flushDiskType: SYNC_FLUSH answers after the commit is on disk."""

    SYNC = "sync"
    ASYNC = "async"


def reachable_address(host: str, port: int) -> str:
    """``host:port`` a listener on ``host`` is reached at from elsewhere: a wildcard host is the
    machine's name; an IPv6 host is bracketed."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class BrokerSettings(BaseSettings):
    """Everything a broker process can be told."""

    model_config = SettingsConfigDict(env_prefix="HALFMQ_", extra="forbid")

    database_url: str = Field(
        "sqlite:///./halfmq.db",
        description="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://user@host/db",
    )
    host: str = Field(
        "127.0.0.1",
        description="Address to listen on; beyond loopback with the ACL off, the broker warns "
        "that anyone who can reach the port owns it",
    )
    port: int = Field(9876, ge=0, le=65535, description="Port to listen on")
    broker_id: str = Field("", description="Name of this broker in logs, claims and traces")
    broker_beat_seconds: float = Field(
        10,
        gt=0,
        description="How often this broker records in the store that it is alive (GET "
        "/v1/brokers and the console list the brokers sharing the store: live when seen within "
        "three beats)",
    )
    trace: bool = Field(
        True,
        description="Write the message trace's own events (CHECKED, RESUMED, the clients' "
        "CLIENT_PUB and CLIENT_SUB); off, only the events read from the rows remain",
    )
    auto_create_topics: bool = Field(
        False, description="Create a topic on its first send (off for production)"
    )
    default_topic_queues: int = Field(
        4, ge=1, le=1024, description="Queues of a topic created without a count"
    )
    max_message_bytes: int = Field(
        4 * 1024 * 1024, ge=1, description="Largest message body (plus properties); larger is 413"
    )
    flush: Flush = Field(
        Flush.SYNC,
        description="sync: a 2xx means committed and on disk; async: faster, and a power loss "
        "can lose the last acknowledged writes",
    )
    retention_hours: float = Field(
        48,
        gt=0,
        description="Messages, finished deliveries, resolved halves and trace events older than "
        "this are purged, unless still needed (RocketMQ's fileReservedTime)",
    )
    dead_letter_retention_hours: float = Field(
        168, gt=0, description="How long %DLQ% messages are kept (their own retention)"
    )
    retention_hard_limit_hours: float | None = Field(
        None,
        gt=0,
        description="A message a consumer group has not yet passed is kept until this old, then "
        "expired (counted on the group, logged); unset: kept until consumed",
    )
    retention_wait_for_export: bool = Field(
        True,
        description="Keep what the reconciliation export (`halfmq export`) has not yet read; "
        "off when the export is not used",
    )
    purge_interval_seconds: float = Field(
        60, gt=0, description="How often the purge looks for what retention lets go"
    )
    purge_batch: int = Field(
        1000, ge=1, le=100_000, description="Most rows one purge unit of work deletes"
    )
    purge_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Share of the store writer's time the purge takes while it keeps up "
        "(doubled for each round that falls behind)",
    )
    purge_pause_seconds: float = Field(
        0.002, ge=0, description="Least pause between the purge's units of work"
    )
    transaction_timeout_seconds: float = Field(
        6, ge=0, description="A half older than this with no decision is checked back"
    )
    transaction_check_interval_seconds: float = Field(
        30, gt=0, description="How often the check-back scheduler runs a round"
    )
    transaction_check_max: int = Field(
        15, ge=1, description="Answered checks before a half is DISCARDED (still resolvable)"
    )
    producer_expiry_seconds: float = Field(
        120, gt=0, description="A producer instance is live while its heartbeat is younger"
    )
    check_timeout_seconds: float = Field(
        3, gt=0, description="How long a push check waits for the producer's answer"
    )
    check_unreachable_seconds: float = Field(
        30,
        gt=0,
        description="How long a producer instance whose check could not be delivered (refused, "
        "reset, connect time-out) gets no checks; its checks go to another live instance",
    )
    check_undelivered_alert_seconds: float = Field(
        3600,
        gt=0,
        description="A half whose checks have failed delivery this long is reported (log, metric, "
        "its last_check_error); it is never discarded for it",
    )
    check_round_max: int = Field(
        10_000, ge=1, description="Most due halves one check round handles (the rest wait a round)"
    )
    message_delay_level: str = Field(
        DEFAULT_DELAY_LEVELS,
        description="RocketMQ's delay levels, space-separated (retry k uses level 3+k)",
    )
    max_reconsume_times: int = Field(
        16, ge=0, description="Retries before a message goes to the DLQ (a group's own wins)"
    )
    scheduler: bool = Field(True, description="Run the background schedulers in this process")
    write_batch_max: int = Field(512, ge=1, description="Most requests one store commit carries")
    write_queue_max: int = Field(
        20_000, ge=1, description="Requests waiting for a store commit beyond which sends get 429"
    )
    pool_size: int = Field(8, ge=1, description="Store connections for reads")
    log_level: str = Field("info", description="debug, info, warning or error")
    metrics: bool = Field(
        True,
        description="Latency histograms (requests, store commits, checks) and the store's "
        "readings at each /metrics scrape (pending halves, consumer lag, DLQ depth); the "
        "counters stay",
    )
    opentelemetry: bool = Field(
        False,
        description="FastAPI's native OpenTelemetry spans and metrics for every request, to the "
        "globally configured providers (off: not even checked per request)",
    )
    auto_create_groups: bool = Field(
        True,
        description="Create a consumer group on its first subscription (RocketMQ's "
        "autoCreateSubscriptionGroup)",
    )
    receive_max_wait_seconds: float = Field(
        30, ge=0, description="Longest long poll of a receive (a longer wait_seconds is cut)"
    )
    receive_poll_seconds: float = Field(
        0.5,
        gt=0,
        description="How often a waiting receive looks at the store for other brokers' messages",
    )
    consumer_expiry_seconds: float = Field(
        120, gt=0, description="A consumer member is live while it received this recently"
    )
    allowed_hosts: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Host header values the broker answers (a DNS-rebinding guard; others are 400 "
        "INVALID_HOST): names, addresses or *.domain, comma-separated; '*' for any. Default: "
        "localhost, 127.0.0.1, ::1 and the --host name; the address a request was sent to "
        "always passes",
    )
    acl_file: Path | None = Field(
        None, description="RocketMQ plain_acl.yml of accounts and white-listed addresses (ACL on)"
    )
    acl_reload_seconds: float = Field(
        2, gt=0, description="How often the ACL file and the store's newest ACL are looked at"
    )
    acl_window_seconds: float = Field(
        300,
        gt=0,
        le=3600,
        description="A signed request's timestamp may be this far from the broker's clock",
    )
    acl_public_ops: bool = Field(
        False,
        description="With the ACL on, serve /metrics, /docs and /openapi.json without a signature",
    )
    acl_rate_limit: float = Field(
        5000,
        ge=0,
        description="Requests a second per access key (bursts of twice that) beyond which the "
        "broker answers 429 RATE_LIMITED; 0: no limit",
    )
    callback_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts a push check may go to besides the address the heartbeat came from: "
        "addresses (10.0.0.*, 10.0.0.1-100, CIDR) or names, comma-separated; '*' for any",
    )
    callback_ports: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Ports a push check may go to: numbers and ranges (8000-8999), "
        "comma-separated. Default: any port but the broker's own listeners and its store's. "
        "The broker's own listeners and the store's address are refused whatever this says",
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Proxies trusted to name the client in X-Forwarded-For (Forwarded and "
        "X-Real-IP are never read): addresses or CIDR, comma-separated; '*' for any. Default: "
        "none -- the "
        "forwarded headers are ignored and the peer's address is the client's (white lists, "
        "the callback rule and the console's sign-in throttle read it)",
    )
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="Largest request header block (names and values); larger is 431 "
        "HEADERS_TOO_LARGE",
    )
    max_headers: int = Field(
        100, ge=1, description="Most request headers; more is 431 HEADERS_TOO_LARGE"
    )
    max_delay_seconds: float = Field(
        DEFAULT_MAX_DELAY_SECONDS,
        gt=0,
        description="Furthest a deliver_at may be in the future (RocketMQ 5's timerMaxDelaySec, "
        "3 days); further is 422 DELIVER_AT_TOO_FAR",
    )
    console: bool = Field(
        True,
        description="Serve the operations console at /console (behind the ACL like every route)",
    )
    console_reports_dir: Path | None = Field(
        None,
        description="The reconciliation job's <out>/report directory: the console lists each "
        "day's folder in it (date=YYYY-MM-DD/) with its summary.json (figures) and report.html "
        "(the page)",
    )
    console_session_secret: str | None = Field(
        None,
        repr=False,  # never in a repr, a log line or an error
        description="Secret the console's session cookies and CSRF tokens are signed with (a key "
        "derived from it); the same on every broker behind one address. Unset: a random one "
        "per process (sessions end when the broker restarts)",
    )
    console_session_hours: float = Field(
        8, gt=0, le=24 * 30, description="How long a console session lasts after its login"
    )
    grpc_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Also answer RocketMQ 5's gRPC protocol (apache.rocketmq.v2, the official "
        "clients') on this port of --host. Default: off",
    )
    grpc_tls_cert: Path | None = Field(
        None, description="TLS certificate chain (PEM) of the gRPC port (with --grpc-tls-key)"
    )
    grpc_tls_key: Path | None = Field(
        None, description="TLS private key (PEM, unencrypted) of --grpc-tls-cert"
    )
    grpc_allow_insecure: bool = Field(
        False,
        description="With the ACL on, accept signed gRPC clients without TLS on a non-loopback "
        "address (their MQv2-HMAC-SHA1 signature covers only a date: no body, no replay guard)",
    )
    grpc_producer_groups: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Producer group of a gRPC producer's topics, as topic=group pairs, "
        "comma-separated. Default: a topic's own name (RocketMQ's proxy)",
    )
    ssl_certfile: Path | None = Field(
        None, description="TLS certificate chain (PEM): serve HTTPS (with --ssl-keyfile)"
    )
    ssl_keyfile: Path | None = Field(
        None, description="TLS private key (PEM, unencrypted) of --ssl-certfile"
    )

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value.strip() in ("sqlite://", "sqlite:///:memory:", "sqlite:///"):
            raise ValueError(
                "a private in-memory SQLite database cannot be shared by the broker's reader and "
                "writer connections: use a file (sqlite:///path.db) or a shared-cache URI "
                "(sqlite:///file:NAME?mode=memory&cache=shared&uri=true)"
            )
        return check_database_url(value)

    @field_validator("callback_hosts", mode="before")
    @classmethod
    def _split_callback_hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("forwarded_allow_ips", "callback_ports", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list | tuple):
            return [p.strip() for item in value for p in str(item).split(",") if p.strip()]
        return value

    @field_validator("callback_ports")
    @classmethod
    def _check_callback_ports(cls, value: list[str]) -> list[str]:
        parse_ports(value)  # a ValueError naming the bad entry
        return value

    @field_validator("grpc_producer_groups", mode="before")
    @classmethod
    def _split_pairs(cls, value: Any) -> Any:
        """``"t1=g1,t2=g2"`` (environment, flags) or a mapping (a config file)."""
        if isinstance(value, list | tuple):
            value = ",".join(str(item) for item in value)
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            topic, sep, group = part.partition("=")
            if not sep or not topic.strip() or not group.strip():
                raise ValueError(f"bad topic=group pair {part!r}")
            pairs[topic.strip()] = group.strip()
        return pairs

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        """``"a,b"`` (environment, flags) or a list; empty is the default."""
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        hosts = [host.strip() for item in items for host in str(item).split(",") if host.strip()]
        for host in hosts:
            if "*" in host[1:] or (host.startswith("*") and host != "*" and host[:2] != "*."):
                raise ValueError(f"bad host pattern {host!r}: a name, an address, *.domain or *")
        return hosts or None

    @field_validator("ssl_certfile", "ssl_keyfile", "grpc_tls_cert", "grpc_tls_key")
    @classmethod
    def _check_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{value} is not a file")
        return value

    @model_validator(mode="after")
    def _check_hard_limit(self) -> BrokerSettings:
        hard = self.retention_hard_limit_hours
        if hard is not None and hard <= self.retention_hours:
            raise ValueError(
                f"retention_hard_limit_hours ({hard:g}) must be longer than retention_hours "
                f"({self.retention_hours:g}): it is how long an unconsumed message is kept"
            )
        return self

    @model_validator(mode="after")
    def _check_tls_pair(self) -> BrokerSettings:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            given, missing = (
                ("ssl_certfile", "ssl_keyfile")
                if self.ssl_keyfile is None
                else ("ssl_keyfile", "ssl_certfile")
            )
            raise ValueError(f"{given} needs {missing} too: TLS takes a certificate and its key")
        return self

    @field_validator("message_delay_level")
    @classmethod
    def _check_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def broker_name(self) -> str:
        """``broker_id``, else ``host:pid:port``: who claims, in logs and traces."""
        return self.broker_id or f"{socket.gethostname()}:{os.getpid()}:{self.port}"

    @property
    def listen_address(self) -> str:
        """``host:port`` this broker listens on, as the list of brokers shows it."""
        return reachable_address(self.host, self.port)

    # -- the domain's plain values --------------------------------------------------------------

    def domain_config(self) -> DomainConfig:
        return DomainConfig(
            auto_create_topics=self.auto_create_topics,
            default_topic_queues=self.default_topic_queues,
            max_message_bytes=self.max_message_bytes,
            delay_levels_ms=self.delay_levels_ms,
            transaction_timeout_ms=int(self.transaction_timeout_seconds * 1000),
            max_delay_ms=int(self.max_delay_seconds * 1000),
        )

    def check_policy(self) -> CheckPolicy:
        return CheckPolicy(
            check_max=self.transaction_check_max,
            interval_ms=int(self.transaction_check_interval_seconds * 1000),
            producer_expiry_ms=int(self.producer_expiry_seconds * 1000),
            push_timeout_ms=int(self.check_timeout_seconds * 1000),
            unreachable_ms=int(self.check_unreachable_seconds * 1000),
            undelivered_alert_ms=int(self.check_undelivered_alert_seconds * 1000),
            broker_id=self.broker_name,
            trace=self.trace,
        )

    def retention_policy(self) -> RetentionPolicy:
        hard = self.retention_hard_limit_hours
        return RetentionPolicy(
            retention_ms=int(self.retention_hours * 3_600_000),
            dead_letter_retention_ms=int(self.dead_letter_retention_hours * 3_600_000),
            hard_limit_ms=None if hard is None else int(hard * 3_600_000),
            wait_for_export=self.retention_wait_for_export,
            batch=self.purge_batch,
            broker_id=self.broker_name,
        )

    def consumer_config(self) -> ConsumerConfig:
        return ConsumerConfig(
            auto_create_groups=self.auto_create_groups,
            max_reconsume_times=self.max_reconsume_times,
            delay_levels_ms=self.delay_levels_ms,
            consumer_expiry_ms=int(self.consumer_expiry_seconds * 1000),
            broker_id=self.broker_name,
            trace=self.trace,
        )


# The stores the broker is built for, and the driver each is spoken to with.
_STORES = {"sqlite": ("pysqlite",), "postgresql": ("psycopg",)}


def check_database_url(url: str) -> str:
    """``url`` if the broker can open a store there, else a ValueError that says why: a URL
    SQLAlchemy can read, of SQLite or PostgreSQL (with psycopg), and a SQLite file whose
    directory exists -- the broker creates a new file, never a directory (a mistyped path would
    otherwise become a new, empty store)."""
    from sqlalchemy.engine import make_url  # only a broker's start needs SQLAlchemy
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(
            "not a database URL: sqlite:///path.db or postgresql+psycopg://user@host/db"
        ) from None
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if backend not in _STORES:
        raise ValueError(
            f"halfmq stores in SQLite or PostgreSQL, not {backend} "
            "(sqlite:///path.db or postgresql+psycopg://user@host/db)"
        )
    if driver not in _STORES[backend]:
        raise ValueError(
            f"{backend}+{driver} is not a driver halfmq uses: "
            f"write {backend}+{_STORES[backend][0]}://..."
        )
    if backend == "sqlite":
        _check_sqlite_directory(parsed.database)
    return url


def _check_sqlite_directory(database: str | None) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return  # in memory, or a SQLite URI (its own rules)
    folder = Path(database).parent
    if not folder.is_dir():
        why = "is not a directory" if folder.exists() else "does not exist"
        raise ValueError(
            f"the SQLite file's directory {folder} {why} (the broker creates a "
            "new file, not its directory: create it first, or check the path)"
        )


def read_config_file(path: Path) -> dict[str, Any]:
    """Load a config file of settings keys (``.yaml``/``.yml``, ``.toml`` or ``.json``); a file
    that cannot be read or parsed is a ValueError naming it, the line and the reason."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"config file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"config file {path}: cannot read it: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"config file {path} must end in .yaml, .yml, .toml or .json")
    data = _parse_config(path, suffix, text)
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _parse_config(path: Path, suffix: str, text: str) -> Any:
    # ``from None``: the parsers' messages and chained errors quote the offending text, which may
    # be a secret (console_session_secret)
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
            return data.get("halfmq", data)
        if suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text) or {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = "" if mark is None else f":{mark.line + 1}"
        raise ValueError(f"config file {path}{where}: YAML syntax: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"config file {path}: not valid YAML ({type(exc).__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {path}: TOML syntax: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config file {path}:{exc.lineno}: JSON syntax: {exc.msg}") from None


def load_settings(
    config_file: Path | None = None, overrides: dict[str, Any] | None = None
) -> BrokerSettings:
    """Environment, then the config file, then explicit overrides (flags) -- later wins."""
    values: dict[str, Any] = {}
    if config_file is not None:
        values.update(read_config_file(config_file))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return BrokerSettings(**values)
