"""The gRPC port with the ACL on: MQv2-HMAC-SHA1 signatures checked against ``plain_acl.yml``'s
accounts, the same permissions as REST, a clock rule for clients outside UTC, and TLS."""

from __future__ import annotations

import hmac
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from hashlib import sha1
from pathlib import Path

import pytest

from broker_service.acl.errors import AclUnauthenticated
from broker_service.acl.file import parse_acl
from broker_service.grpc.auth import Authenticator, Caller
from broker_service.grpc.server import Listen, check_listen
from broker_service.store import migrate
from framework.signing import HalfmqAuth
from tests.acceptance.grpc.clients import GrpcBroker, client_log, errors, run_client
from tests.support import ACL, OPERATOR

BOB = ("--ak", "bob-bank-key", "--sk", "bob-bank-secret")  # PUB on transfers and bob-bank
SMITH = ("--ak", "smith-bank-key", "--sk", "smith-bank-secret")  # SUB only


def start(url: str, tmp_path: Path, *extra: str) -> GrpcBroker:
    migrate.upgrade(url)
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    broker = GrpcBroker(
        url,
        tmp_path / "broker.log",
        "--acl-file", str(acl), *extra,
        env={"HALFMQ_GRPC_PRODUCER_GROUPS": "transfers=bob-bank"},
    )  # fmt: skip
    broker.start(timeout=90)  # a loaded machine starts Python slowly
    broker.topic("transfers", auth=HalfmqAuth(OPERATOR))
    return broker


@pytest.fixture
def acl_broker(sqlite_url: str, tmp_path: Path) -> Iterator[GrpcBroker]:
    broker = start(sqlite_url, tmp_path)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.slow
def test_signed_producer_outside_utc_commits_in_its_mapped_group(
    acl_broker: GrpcBroker, tmp_path: Path
) -> None:
    """Bob's account signs; its client writes its local time (UTC+5:30) with a Z: accepted.
    ``grpc_producer_groups`` puts the topic's producer in Bob's group, the one its PUB names."""
    events = run_client(
        tmp_path / "home", acl_broker.endpoint, "commit", "--topic", "transfers", *BOB,
        env={"TZ": "Asia/Kolkata"},
    )  # fmt: skip
    assert not errors(events), events
    (half,) = [e for e in events if e["event"] == "half"]
    record = acl_broker.get(f"/v1/transactions/{half['transaction_id']}", auth=HalfmqAuth(OPERATOR))
    assert record["state"] == "COMMITTED"
    assert record["producer_group"] == "bob-bank"


@pytest.mark.slow
def test_wrong_secret_is_unauthorized(acl_broker: GrpcBroker, tmp_path: Path) -> None:
    home = tmp_path / "home"
    events = run_client(
        home, acl_broker.endpoint, "send", "--topic", "transfers",
        "--ak", "bob-bank-key", "--sk", "not-bobs-secret",
    )  # fmt: skip
    assert errors(events), events
    said = client_log(home)
    assert "40100, SIGNATURE_INVALID" in said  # Code.UNAUTHORIZED, and why
    assert "not-bobs-secret" not in acl_broker.log_path.read_text()
    stored = acl_broker.get("/v1/messages?topic=transfers", auth=HalfmqAuth(OPERATOR))
    assert stored["messages"] == []


@pytest.mark.slow
def test_missing_pub_is_forbidden(acl_broker: GrpcBroker, tmp_path: Path) -> None:
    """Smith's account may read transfers, not publish: its send is FORBIDDEN, nothing stored,
    and it is no instance of the topic's producer group (it would be sent its checks)."""
    events = run_client(
        tmp_path / "home", acl_broker.endpoint, "send", "--topic", "transfers", *SMITH
    )
    (error,) = errors(events)
    assert error["type"] == "ForbiddenException"
    assert error["message"].startswith("40300, PERMISSION_DENIED")
    assert "lacks PUB on topic 'transfers'" in error["message"]
    stored = acl_broker.get("/v1/messages?topic=transfers", auth=HalfmqAuth(OPERATOR))
    assert stored["messages"] == []
    group = acl_broker.get("/v1/producer-groups/transfers", auth=HalfmqAuth(OPERATOR))
    assert group["instances"] == []


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.mark.slow
def test_tls_port_serves_a_trusting_client_only(
    sqlite_url: str, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    broker = start(sqlite_url, tmp_path, "--grpc-tls-cert", str(cert), "--grpc-tls-key", str(key))
    try:
        trusting = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}
        events = run_client(
            tmp_path / "tls", broker.endpoint, "commit", "--topic", "transfers", "--tls", *BOB,
            env=trusting,
        )  # fmt: skip
        assert not errors(events), events
        plain = run_client(
            tmp_path / "plain", broker.endpoint, "send", "--topic", "transfers", *BOB
        )
        assert errors(plain), plain
        stored = broker.get("/v1/messages?topic=transfers", auth=HalfmqAuth(OPERATOR))
        assert len(stored["messages"]) == 1
    finally:
        broker.stop()


def test_signed_clients_without_tls_only_on_loopback_unless_allowed() -> None:
    """The signature covers a date only: beyond loopback it needs TLS, or the operator's
    explicit grpc_allow_insecure."""
    with pytest.raises(ValueError, match="without TLS"):
        check_listen(Listen("0.0.0.0", 8081), acl=True)
    check_listen(Listen("0.0.0.0", 8081, allow_insecure=True), acl=True)
    check_listen(Listen("0.0.0.0", 8081, Path("c.pem"), Path("k.pem")), acl=True)
    check_listen(Listen("127.0.0.1", 8081), acl=True)
    check_listen(Listen("0.0.0.0", 8081), acl=False)  # nothing signed to expose
    with pytest.raises(ValueError, match="go together"):
        check_listen(Listen("127.0.0.1", 8081, tls_cert=Path("c.pem")), acl=False)


NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def _signed_at(stated: datetime, secret: str = "bob-bank-secret") -> Caller:
    date = stated.strftime("%Y%m%dT%H%M%SZ")
    signature = hmac.new(secret.encode(), date.encode(), sha1).hexdigest()
    header = (
        f"MQv2-HMAC-SHA1 Credential=bob-bank-key, SignedHeaders=x-mq-date-time, "
        f"Signature={signature}"
    )
    metadata = [("authorization", header), ("x-mq-date-time", date)]
    return Caller.of(metadata, "ipv4:127.0.0.1:5000")


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [
        (timedelta(0), True),  # a client in UTC
        (timedelta(hours=5, minutes=30), True),  # its local time in India, with a Z
        (timedelta(hours=-9, seconds=-40), True),  # Alaska, a clock 40 s behind
        (timedelta(hours=13, minutes=45), True),  # Chatham Islands in summer
        (timedelta(hours=2, minutes=7), False),  # no time zone is 2:07 ahead
        (timedelta(hours=15), False),  # beyond every time zone
        (timedelta(days=1), False),  # a header from another day
    ],
)
def test_clock_rule_accepts_the_current_time_of_any_time_zone(
    offset: timedelta, accepted: bool
) -> None:
    auth = Authenticator(lambda: parse_acl(ACL), lambda: int(NOW.timestamp() * 1000), 60_000)
    caller = _signed_at(NOW + offset)
    if accepted:
        assert auth.signer(caller) == "bob-bank-key"
    else:
        with pytest.raises(AclUnauthenticated, match="not the broker's current time"):
            auth.signer(caller)


def test_a_forged_signature_is_refused_and_no_secret_is_shown() -> None:
    auth = Authenticator(lambda: parse_acl(ACL), lambda: int(NOW.timestamp() * 1000), 60_000)
    caller = _signed_at(NOW, secret="guessed")
    with pytest.raises(AclUnauthenticated) as refused:
        auth.signer(caller)
    assert refused.value.code.value == "SIGNATURE_INVALID"
    assert "guessed" not in str(refused.value)
    assert "bob-bank-secret" not in repr(caller) + str(refused.value)
    assert "authorization" not in repr(caller).lower()
