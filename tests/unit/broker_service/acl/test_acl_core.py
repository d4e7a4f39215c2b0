"""The ACL core: the plain_acl.yml file, address patterns, the decision and the signature verifier."""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path
from typing import Any

import pytest

import broker_service.acl
from broker_service.acl import (
    Account,
    AclConfig,
    AclDenied,
    AclError,
    AclErrorCode,
    AclFileError,
    AclUnauthenticated,
    Need,
    NeedKind,
    Perm,
    authorize,
    canonical_query,
    canonical_request,
    dump_acl,
    group_of_topic,
    judged_as,
    load_acl,
    parse_acl,
    parse_address,
    signature_of,
    verify,
)
from broker_service.acl.signature import EMPTY_BODY_SHA256, HEADERS

SECRET = "Zq8-unique-secret-4711"
ADMIN_SECRET = "Adm1n-unique-secret-0815"

# RocketMQ's sample plain_acl.yml (its keys, comments and layout), with halfmq's accounts added.
FULL_FILE = f"""\
# RocketMQ-style ACL for the banks
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
  - 127.0.0.1
  - ::1

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true

  - accessKey: bob-bank
    secretKey: "{SECRET}"
    whiteRemoteAddress: 10.10.103.1-50
    defaultTopicPerm: SUB
    topicPerms: ["transfers=PUB|SUB", "audit=SUB", "secret=DENY"]
    groupPerms:
      - bob-bank-tx=PUB
      - bob-audit=ANY

  - accessKey: operator
    secretKey: '{ADMIN_SECRET}'
    admin: yes
dataVersion:
  - counter: 3
    timestamp: 1700000000000
"""


@pytest.fixture
def config() -> AclConfig:
    return parse_acl(FULL_FILE, "plain_acl.yml")


# --- the file -------------------------------------------------------------------------------


def test_a_rocketmq_file_is_read_with_its_keys(config: AclConfig) -> None:
    assert [p.text for p in config.global_white_remote_addresses] == [
        "10.10.103.*",
        "192.168.0.*",
        "127.0.0.1",
        "::1",
    ]
    assert list(config.accounts) == ["RocketMQ", "rocketmq2", "bob-bank", "operator"]
    sample = config.accounts["RocketMQ"]
    assert sample.secret_key == "12345678"  # an unquoted number is kept as written
    assert sample.white_remote_address is None
    assert sample.admin is False
    assert sample.default_topic_perm is Perm.DENY
    assert sample.default_group_perm is Perm.SUB
    assert dict(sample.topic_perms) == {
        "topicA": Perm.DENY,
        "topicB": Perm.PUB | Perm.SUB,
        "topicC": Perm.SUB,
    }
    assert dict(sample.group_perms) == {
        "groupA": Perm.DENY,
        "groupB": Perm.PUB | Perm.SUB,
        "groupC": Perm.SUB,
    }
    admin = config.accounts["rocketmq2"]
    assert admin.admin is True
    assert admin.white_remote_address is not None
    assert admin.white_remote_address.text == "192.168.1.*"
    assert (admin.default_topic_perm, admin.default_group_perm) == (Perm.DENY, Perm.DENY)
    bob = config.accounts["bob-bank"]
    assert bob.secret_key == SECRET
    assert bob.group_perms["bob-audit"] == Perm.PUB | Perm.SUB
    assert bob.default_group_perm is Perm.DENY  # absent: DENY, as RocketMQ
    assert config.accounts["operator"].admin is True


def test_load_reads_the_file_and_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(FULL_FILE)
    assert load_acl(path) == parse_acl(FULL_FILE)
    path.write_text("accounts:\n  - accessKey: bob-bank\n    secretKey: short\n")
    with pytest.raises(AclFileError) as raised:
        load_acl(path)
    assert str(raised.value) == f"{path}:3: secretKey must be 7-256 characters"
    with pytest.raises(AclFileError, match="cannot read the file"):
        load_acl(tmp_path / "absent.yml")


ACCOUNT = "accounts:\n  - accessKey: bob-bank\n    secretKey: s3cret-key\n"

MALFORMED = [
    pytest.param(
        "accounts: [\n  - a\n",
        2,
        "YAML syntax: expected the node content, but found '-'",
        id="yaml-syntax",
    ),
    pytest.param(
        "accounts:\n  - accessKey: x\n bad: 1\n",
        3,
        "YAML syntax: expected <block end>, but found '<block mapping start>'"
        " (while parsing a block mapping at line 1)",
        id="yaml-indentation",
    ),
    pytest.param("", None, "the file is empty", id="empty"),
    pytest.param("- accounts\n", 1, "must be a mapping", id="top-level-list"),
    pytest.param("globalWhiteRemoteAddresses: []\n", 1, "no 'accounts'", id="no-accounts"),
    pytest.param(
        "globalWhiteRemoteAddress:\n  - 1.2.3.4\n" + ACCOUNT,
        1,
        "unknown key 'globalWhiteRemoteAddress' in the file (did you mean"
        " 'globalWhiteRemoteAddresses'?)",
        id="typo-top-level",
    ),
    pytest.param(
        "accounts:\n  - acessKey: bob-bank\n    secretKey: s3cret-key\n",
        2,
        "unknown key 'acessKey' in an account (did you mean 'accessKey'?)",
        id="typo-accessKey",
    ),
    pytest.param(
        ACCOUNT + "    admin: false\n    admin: true\n", 5, "'admin' appears twice", id="dup-key"
    ),
    pytest.param("accounts:\n  bob: 1\n", 2, "accounts must be a list", id="accounts-mapping"),
    pytest.param("accounts:\n  - bob-bank\n", 2, "an account must be a mapping", id="str-account"),
    pytest.param(
        "accounts:\n  - secretKey: s3cret-key\n", 2, "the account has no accessKey", id="no-ak"
    ),
    pytest.param(
        "accounts:\n  - accessKey: bob-bank\n", 2, "the account has no secretKey", id="no-sk"
    ),
    pytest.param(
        "accounts:\n  - accessKey: bob-bank\n    secretKey: ''\n",
        3,
        "secretKey must be 7-256 characters",
        id="empty-secret",
    ),
    pytest.param(
        "accounts:\n  - accessKey: bob-bank\n    secretKey: 123456\n",
        3,
        "secretKey must be 7-256 characters",
        id="short-secret",
    ),
    pytest.param(
        "accounts:\n  - accessKey: bob\n    secretKey: s3cret-key\n",
        2,
        "accessKey 'bob' must be 7-128 characters",
        id="short-access-key",
    ),
    pytest.param(
        "accounts:\n  - accessKey: [bob-bank]\n    secretKey: s3cret-key\n",
        2,
        "accessKey must be a text, not a list",
        id="access-key-list",
    ),
    pytest.param(ACCOUNT + "    admin: maybe\n", 4, "admin must be true or false", id="admin"),
    pytest.param(
        ACCOUNT + "    topicPerms: transfers=PUB\n", 4, "topicPerms must be a list", id="perms-str"
    ),
    pytest.param(
        ACCOUNT + "    topicPerms:\n      - transfers=PUB\n      - audit=READ\n",
        6,
        "'READ' is not a permission",
        id="bad-perm",
    ),
    pytest.param(
        ACCOUNT + "    defaultGroupPerm: pub\n",
        4,
        "'pub' is not a permission",
        id="bad-default-perm",
    ),
    pytest.param(
        ACCOUNT + "    groupPerms:\n      - groupA\n",
        5,
        "groupPerms entry 'groupA' must be written name=PERM",
        id="no-equals",
    ),
    pytest.param(
        ACCOUNT + "    topicPerms:\n      - transfers=PUB=SUB\n",
        5,
        "must be written name=PERM",
        id="two-equals",
    ),
    pytest.param(
        ACCOUNT + "    topicPerms:\n      - bank transfers=PUB\n",
        5,
        "'bank transfers' is not a topic or group name",
        id="bad-name",
    ),
    pytest.param(
        ACCOUNT + "    topicPerms:\n      - '%RETRY%bob=SUB'\n",
        5,
        "list the group in groupPerms instead",
        id="retry-topic-name",
    ),
    pytest.param(
        ACCOUNT + "    topicPerms:\n      - audit=SUB\n      - audit=PUB\n",
        6,
        "'audit' is listed twice in topicPerms",
        id="dup-resource",
    ),
    pytest.param(
        "globalWhiteRemoteAddresses:\n  - 10.0.0.*\n  - 10.0.300.1\n" + ACCOUNT,
        3,
        "'10.0.300.1' is not an IPv4 or IPv6 address",
        id="bad-global-address",
    ),
    pytest.param(
        ACCOUNT + "    whiteRemoteAddress: 192.168.*.1\n",
        4,
        "every segment after a '*' or a range must be '*'",
        id="bad-account-address",
    ),
    pytest.param(
        ACCOUNT + "  - accessKey: bob-bank\n    secretKey: another-one\n",
        4,
        "accessKey 'bob-bank' is defined twice (first at line 2)",
        id="dup-access-key",
    ),
]


@pytest.mark.parametrize(("text", "line", "reason"), MALFORMED)
def test_a_malformed_file_is_refused_with_its_line(
    text: str, line: int | None, reason: str
) -> None:
    with pytest.raises(AclFileError) as raised:
        parse_acl(text, "plain_acl.yml")
    error = raised.value
    assert (error.source, error.line) == ("plain_acl.yml", line)
    assert reason in error.reason
    where = "plain_acl.yml" if line is None else f"plain_acl.yml:{line}"
    assert str(error) == f"{where}: {error.reason}"


def test_rocketmq_data_version_and_blank_white_address_are_accepted() -> None:
    text = ACCOUNT + "    whiteRemoteAddress: ''\ndataVersion:\n  - counter: 1\n"
    assert parse_acl(text).accounts["bob-bank"].white_remote_address is None


def test_dump_round_trips_and_keeps_the_version(config: AclConfig) -> None:
    text = dump_acl(config)
    again = parse_acl(text)
    assert again == config
    assert again.version == config.version
    assert dump_acl(again) == text
    assert "secretKey: '12345678'" in text  # the file keeps its secrets, quoted as text
    assert "dataVersion" not in text


def test_the_version_follows_content_not_order(config: AclConfig) -> None:
    reordered = AclConfig.of(
        reversed(list(config.accounts.values())), reversed(config.global_white_remote_addresses)
    )
    assert reordered.version == config.version
    bob = config.accounts["bob-bank"]
    changed = config.with_account(
        Account(bob.access_key, "another-secret", topic_perms=bob.topic_perms)
    )
    assert changed.version != config.version
    assert list(changed.accounts) == list(config.accounts)  # replaced in place
    assert len(config.without_account("bob-bank").accounts) == 3
    assert config.with_global_white([]).global_white_remote_addresses == ()
    assert len(config.version) == 16


# --- addresses -------------------------------------------------------------------------------

ADDRESS_CASES = [
    ("*", "8.8.8.8", True),
    ("*", "2001:db8::1", True),
    ("*.*.*.*", "1.2.3.4", True),
    ("192.168.0.1", "192.168.0.1", True),
    ("192.168.0.1", "192.168.0.2", False),
    ("192.168.0.1", "::ffff:192.168.0.1", True),
    ("192.168.0.*", "192.168.0.254", True),
    ("192.168.0.*", "192.168.1.1", False),
    ("192.168.*", "192.168.77.3", True),
    ("192.168.*.", "192.168.77.3", True),
    ("192.168.*.*", "192.169.0.1", False),
    ("192.168.1.1-100", "192.168.1.100", True),
    ("192.168.1.1-100", "192.168.1.101", False),
    ("192.168.1.1-100", "192.168.1.0", False),
    ("192.168.1-10.*", "192.168.10.200", True),
    ("192.168.1-10.*", "192.168.11.1", False),
    ("192.168.0.{1,2,3}", "192.168.0.2", True),
    ("192.168.0.{1,2,3}", "192.168.0.4", False),
    ("192.168.0.1,10.0.0.*", "10.0.0.9", True),
    ("192.168.0.1,10.0.0.*", "10.0.1.9", False),
    ("10.0.0.0/8", "10.255.0.1", True),
    ("10.0.0.0/8", "11.0.0.1", False),
    ("::1", "::1", True),
    ("::1", "[::1]", True),
    ("::1", "127.0.0.1", False),
    ("2001:db8::/32", "2001:db8:1::5", True),
    ("1050:0:0:0:5:600:300c:*", "1050::5:600:300c:ab", True),
    ("1050::5:600:300c:1-ff", "1050::5:600:300c:ff", True),
    ("1050::5:600:300c:1-ff", "1050::5:600:300c:100", False),
    ("1050::5:{1,2}", "1050::5:2", True),
    ("10.0.0.*", "2001:db8::1", False),
    ("10.0.0.*", "testclient", False),  # not an IP address: no match, no error
    ("10.0.0.*", "", False),
]


@pytest.mark.parametrize(("pattern", "ip", "expected"), ADDRESS_CASES)
def test_address_patterns(pattern: str, ip: str, expected: bool) -> None:
    assert parse_address(pattern).matches(ip) is expected


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("", "cannot be empty"),
        ("10.0.0.256", "not an IPv4 or IPv6 address"),
        ("localhost", "not an IPv4 or IPv6 address"),
        ("10.0.0.1/8", "host bits set"),
        ("*.168.0.1", "first segment must be a number"),
        ("1-5.0.0.1", "first segment must be a number"),
        ("10.*.0.1", "every segment after"),
        ("10.1-5.1-5.*", "every segment after"),
        ("10.0.0.9-3", "out of range"),
        ("10.0.0.1-300", "out of range"),
        ("10.0.0.a-b", "is not a number"),
        ("10.0.0.-5", "is not a number"),
        ("10.0.1-2", "does not have 4 segments"),
        ("10.0.{1,2}", "fourth segment"),
        ("10.0.{1,2}.1", "braces"),
        ("10.0.0.{1,,2}", "empty entry"),
        ("10.0.0.1,,10.0.0.2", "empty entry"),
        ("1::2::*", "more than one '::'"),
    ],
)
def test_bad_address_patterns_say_why(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_address(pattern)


# --- permissions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "perm"),
    [
        ("DENY", Perm.DENY),
        ("PUB", Perm.PUB),
        ("SUB", Perm.SUB),
        ("PUB|SUB", Perm.PUB | Perm.SUB),
        ("SUB|PUB", Perm.PUB | Perm.SUB),
        (" PUB | SUB ", Perm.PUB | Perm.SUB),
        ("ANY", Perm.PUB | Perm.SUB),
    ],
)
def test_perm_strings(text: str, perm: Perm) -> None:
    assert Perm.parse(text) is perm
    assert Perm.parse(perm.label) is perm


def _denied(config: AclConfig, key: str, *needs: Need, ip: str = "127.0.0.1") -> AclError | None:
    try:
        authorize(config, key, ip, needs)
    except AclError as error:
        return error
    return None


def test_an_entry_wins_over_the_default_and_explicit_deny_wins(config: AclConfig) -> None:
    # bob-bank: defaultTopicPerm SUB, topicPerms transfers=PUB|SUB, audit=SUB, secret=DENY
    assert _denied(config, "bob-bank", Need.topic("transfers", Perm.PUB), ip="10.10.103.7") is None
    assert _denied(config, "bob-bank", Need.topic("anything", Perm.SUB), ip="10.10.103.7") is None
    refused = _denied(config, "bob-bank", Need.topic("secret", Perm.SUB), ip="10.10.103.7")
    assert isinstance(refused, AclDenied)
    assert (refused.status, refused.code) == (403, AclErrorCode.PERMISSION_DENIED)
    assert refused.message == "access key 'bob-bank' lacks SUB on topic 'secret'"
    assert refused.detail == {
        "access_key": "bob-bank",
        "resource_type": "TOPIC",
        "resource": "secret",
        "needs": "SUB",
        "has": "DENY",
    }
    assert _denied(config, "bob-bank", Need.topic("audit", Perm.PUB), ip="10.10.103.7")
    assert _denied(config, "bob-bank", Need.topic("anything", Perm.PUB), ip="10.10.103.7")


def test_defaults_apply_and_are_deny_when_absent(config: AclConfig) -> None:
    # RocketMQ: defaultTopicPerm DENY, defaultGroupPerm SUB
    assert _denied(config, "RocketMQ", Need.group("any-group", Perm.SUB)) is None
    assert _denied(config, "RocketMQ", Need.group("any-group", Perm.PUB)) is not None
    assert _denied(config, "RocketMQ", Need.group("groupA", Perm.SUB)) is not None
    assert _denied(config, "RocketMQ", Need.topic("any-topic", Perm.SUB)) is not None
    assert _denied(config, "RocketMQ", Need.topic("topicB", Perm.PUB | Perm.SUB)) is None
    assert _denied(config, "RocketMQ", Need.topic("topicC", Perm.PUB | Perm.SUB)) is not None
    # bob-bank has no defaultGroupPerm: DENY
    assert _denied(config, "bob-bank", Need.group("other", Perm.SUB), ip="10.10.103.7")


def test_every_need_of_a_route_must_be_met(config: AclConfig) -> None:
    receive_ok = (Need.topic("topicC", Perm.SUB), Need.group("groupC", Perm.SUB))
    assert _denied(config, "RocketMQ", *receive_ok) is None
    refused = _denied(
        config, "RocketMQ", Need.topic("topicC", Perm.SUB), Need.group("groupA", Perm.SUB)
    )
    assert refused is not None
    assert refused.detail["resource"] == "groupA"


def test_admin_may_do_everything_and_only_admin_may_administer(config: AclConfig) -> None:
    everything = (
        Need.admin(),
        Need.topic("topicA", Perm.PUB | Perm.SUB),
        Need.group("groupA", Perm.PUB),
    )
    assert _denied(config, "operator", *everything) is None
    refused = _denied(config, "RocketMQ", Need.admin())
    assert refused is not None
    assert refused.code is AclErrorCode.PERMISSION_DENIED
    assert refused.message == "access key 'RocketMQ' is not an admin account"


def test_retry_and_dlq_topics_are_judged_as_their_group(config: AclConfig) -> None:
    assert judged_as(Need.topic("%RETRY%groupC", Perm.SUB)) == Need.group("groupC", Perm.SUB)
    assert judged_as(Need.topic("%DLQ%groupB", Perm.PUB)) == Need.group("groupB", Perm.PUB)
    assert judged_as(Need.topic("transfers", Perm.SUB)) == Need.topic("transfers", Perm.SUB)
    assert group_of_topic("%RETRY%") is None
    assert group_of_topic("transfers") is None
    # RocketMQ: topic perms DENY by default, but group C is SUB and group A is DENY
    assert _denied(config, "RocketMQ", Need.topic("%RETRY%groupC", Perm.SUB)) is None
    assert _denied(config, "RocketMQ", Need.topic("%DLQ%groupC", Perm.SUB)) is None
    refused = _denied(config, "RocketMQ", Need.topic("%DLQ%groupA", Perm.SUB))
    assert refused is not None
    assert refused.detail["resource_type"] == "GROUP"


def test_public_needs_nothing_and_no_need_means_any_known_account(config: AclConfig) -> None:
    assert _denied(config, "nobody-at-all", Need.public(), ip="8.8.8.8") is None
    authorize(config, "RocketMQ", "192.168.0.7", [])
    with pytest.raises(AclUnauthenticated):
        authorize(config, "nobody-at-all", "192.168.0.7", [])
    with pytest.raises(AclDenied):
        authorize(config, "RocketMQ", "8.8.8.8", [])
    with pytest.raises(ValueError, match="never DENY"):
        Need.topic("t", Perm.DENY)


def test_white_lists_narrow_where_a_key_may_be_used(config: AclConfig) -> None:
    need = Need.topic("topicB", Perm.PUB)
    refused = _denied(config, "RocketMQ", need, ip="172.16.0.1")
    assert isinstance(refused, AclDenied)
    assert refused.code is AclErrorCode.ADDRESS_NOT_ALLOWED
    assert refused.detail == {"remote_address": "172.16.0.1"}
    # bob-bank: global white list includes 10.10.103.*, its own 10.10.103.1-50
    assert _denied(config, "bob-bank", Need.topic("audit", Perm.SUB), ip="10.10.103.50") is None
    refused = _denied(config, "bob-bank", Need.topic("audit", Perm.SUB), ip="10.10.103.51")
    assert refused is not None
    assert refused.code is AclErrorCode.ADDRESS_NOT_ALLOWED
    assert "'bob-bank' may not be used from address '10.10.103.51'" in refused.message
    # rocketmq2 is admin, but 192.168.1.* is outside the global list: the global list wins
    assert _denied(config, "rocketmq2", Need.admin(), ip="192.168.1.5") is not None
    without_global = config.with_global_white([])
    assert _denied(without_global, "rocketmq2", Need.admin(), ip="192.168.1.5") is None
    assert _denied(without_global, "RocketMQ", need, ip="172.16.0.1") is None


def test_an_unknown_key_is_401(config: AclConfig) -> None:
    refused = _denied(config, "mallory-key", Need.topic("topicB", Perm.PUB))
    assert isinstance(refused, AclUnauthenticated)
    assert (refused.status, refused.code) == (401, AclErrorCode.ACCESS_KEY_UNKNOWN)


# --- the signature ---------------------------------------------------------------------------

NOW = 1_767_225_600_000


def _sign(
    secret: str = SECRET,
    method: str = "POST",
    path: str = "/v1/topics/transfers/messages",
    query: str = "",
    body: bytes = b'{"body":"hello"}',
    timestamp: str = str(NOW),
    nonce: str = "nonce-0001",
    key: str = "bob-bank",
) -> dict[str, str]:
    digest = hashlib.sha256(body).hexdigest()
    canonical = canonical_request(method, path, query, digest, timestamp, nonce, key)
    return {
        "X-HalfMQ-AccessKey": key,
        "X-HalfMQ-Timestamp": timestamp,
        "X-HalfMQ-Nonce": nonce,
        "X-HalfMQ-Signature": signature_of(secret, canonical),
    }


def _verify(
    headers: dict[str, str],
    config: AclConfig,
    method: str = "POST",
    path: str = "/v1/topics/transfers/messages",
    query: str = "",
    body: bytes = b'{"body":"hello"}',
    now_ms: int = NOW,
) -> object:
    digest = hashlib.sha256(body).hexdigest()
    return verify(headers, method, path, query, digest, now_ms, config.secret_for)


def _refusal(headers: dict[str, str], config: AclConfig, **request: Any) -> AclUnauthenticated:
    with pytest.raises(AclUnauthenticated) as raised:
        _verify(headers, config, **request)
    assert raised.value.status == 401
    return raised.value


def test_the_canonical_form_is_exactly_the_documented_lines() -> None:
    canonical = canonical_request(
        "get", "/v1/messages", "topic=a&key=x", EMPTY_BODY_SHA256, "1", "nonce-0001", "bob-bank"
    )
    assert canonical == (
        "HALFMQ-HMAC-SHA256\nGET\n/v1/messages\nkey=x&topic=a\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n1\nnonce-0001\nbob-bank"
    )
    expected = hmac.new(SECRET.encode(), canonical.encode(), hashlib.sha256).hexdigest()
    assert signature_of(SECRET, canonical) == expected


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("", ""),
        ("b=2&a=1", "a=1&b=2"),
        ("a=2&a=10&a=1", "a=1&a=10&a=2"),
        ("flag&x=", "flag=&x="),
        ("a=1&&b=2&", "a=1&b=2"),
        ("q=a+b&r=a%20b&s=a b", "q=a%2Bb&r=a%20b&s=a%20b"),
        ("k%7e=%7E&t=~", "k~=~&t=~"),
        ("name=%C3%A9t%C3%A9&raw=été", "name=%C3%A9t%C3%A9&raw=%C3%A9t%C3%A9"),
        ("x=%2f&y=/", "x=%2F&y=%2F"),
        ("e=a=b", "e=a%3Db"),
        ("bad=%FF", "bad=%FF"),
    ],
)
def test_canonical_query(raw: str, canonical: str) -> None:
    assert canonical_query(raw) == canonical


def test_a_correctly_signed_request_verifies(config: AclConfig) -> None:
    signed = _verify(_sign(), config)
    assert signed == broker_service.acl.SignedRequest("bob-bank", NOW, "nonce-0001")


def test_headers_are_read_whatever_their_case(config: AclConfig) -> None:
    headers = {name.lower(): value for name, value in _sign().items()}
    assert _verify(headers, config) is not None


def test_query_parameters_in_another_order_verify_the_same(config: AclConfig) -> None:
    headers = _sign(
        method="GET", path="/v1/messages", query="topic=transfers&key=o-1&limit=5", body=b""
    )
    for query in ("limit=5&key=o-1&topic=transfers", "key=o-1&topic=transfers&limit=5"):
        assert _verify(headers, config, method="GET", path="/v1/messages", query=query, body=b"")


@pytest.mark.parametrize("missing", HEADERS)
def test_each_missing_header_is_named(config: AclConfig, missing: str) -> None:
    headers = _sign()
    del headers[missing]
    refused = _refusal(headers, config)
    assert refused.code is AclErrorCode.SIGNATURE_MISSING
    assert refused.detail == {"missing": [missing]}
    assert missing in refused.message


def test_an_unsigned_request_is_told_the_header_to_send(config: AclConfig) -> None:
    refused = _refusal({"Content-Type": "application/json"}, config)
    assert refused.code is AclErrorCode.SIGNATURE_MISSING
    assert refused.detail == {"missing": ["Authorization"]}
    assert "Authorization: HALFMQ-HMAC-SHA256 AccessKey=" in refused.message


def test_an_unknown_access_key(config: AclConfig) -> None:
    refused = _refusal(_sign(key="mallory-key"), config)
    assert refused.code is AclErrorCode.ACCESS_KEY_UNKNOWN


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-HalfMQ-Timestamp", "2026-01-01T00:00:00Z"),
        ("X-HalfMQ-Timestamp", "-5"),
        ("X-HalfMQ-Nonce", "short"),
        ("X-HalfMQ-Nonce", "has space in it"),
        ("X-HalfMQ-Signature", "abc"),
        ("X-HalfMQ-Signature", "A" * 64),
    ],
)
def test_malformed_headers_are_an_invalid_signature(
    config: AclConfig, header: str, value: str
) -> None:
    headers = _sign()
    headers[header] = value
    refused = _refusal(headers, config)
    assert refused.code is AclErrorCode.SIGNATURE_INVALID
    assert refused.detail == {"header": header}


@pytest.mark.parametrize(
    "request_change",
    [
        {"body": b'{"body":"HELLO"}'},
        {"path": "/v1/topics/audit/messages"},
        {"query": "extra=1"},
        {"method": "PUT"},
    ],
)
def test_a_changed_request_does_not_verify(
    config: AclConfig, request_change: dict[str, Any]
) -> None:
    refused = _refusal(_sign(), config, **request_change)
    assert refused.code is AclErrorCode.SIGNATURE_INVALID


def test_a_wrong_secret_and_a_changed_header_do_not_verify(config: AclConfig) -> None:
    assert _refusal(_sign(secret="not-the-secret"), config).code is AclErrorCode.SIGNATURE_INVALID
    headers = _sign()
    headers["X-HalfMQ-Nonce"] = "nonce-0002"
    assert _refusal(headers, config).code is AclErrorCode.SIGNATURE_INVALID


def test_the_refusal_does_not_tell_which_part_differs(config: AclConfig) -> None:
    good = _sign()["X-HalfMQ-Signature"]
    flip = {"0": "1"}
    refusals = []
    for index in (0, 31, 63):
        wrong = good[:index] + flip.get(good[index], "0") + good[index + 1 :]
        headers = {**_sign(), "X-HalfMQ-Signature": wrong}
        refused = _refusal(headers, config)
        refusals.append((refused.code, refused.message, refused.detail))
    assert refusals[0] == refusals[1] == refusals[2]
    assert all(good not in str(refusal) for refusal in refusals)


@pytest.mark.parametrize("skew_ms", [300_001, -300_001, 3_600_000])
def test_a_timestamp_outside_the_window_is_skewed(config: AclConfig, skew_ms: int) -> None:
    headers = _sign(timestamp=str(NOW + skew_ms))
    refused = _refusal(headers, config)
    assert refused.code is AclErrorCode.TIMESTAMP_SKEWED
    assert refused.detail == {
        "broker_time_ms": NOW,
        "request_time_ms": NOW + skew_ms,
        "skew_seconds": skew_ms / 1000,
        "window_seconds": 300.0,
    }


@pytest.mark.parametrize("skew_ms", [300_000, -300_000, 0])
def test_a_timestamp_inside_the_window_verifies(config: AclConfig, skew_ms: int) -> None:
    assert _verify(_sign(timestamp=str(NOW + skew_ms)), config)


def test_the_window_can_be_set(config: AclConfig) -> None:
    headers = _sign(timestamp=str(NOW + 2_000))
    digest = hashlib.sha256(b'{"body":"hello"}').hexdigest()
    path = "/v1/topics/transfers/messages"
    with pytest.raises(AclUnauthenticated):
        verify(headers, "POST", path, "", digest, NOW, config.secret_for, window_ms=1_000)


def test_nonce_replayed_is_a_401_code_for_the_store() -> None:
    error = AclUnauthenticated(AclErrorCode.NONCE_REPLAYED, "nonce seen before")
    assert (error.status, error.code) == (401, "NONCE_REPLAYED")
    with pytest.raises(ValueError, match="not a 401"):
        AclUnauthenticated(AclErrorCode.PERMISSION_DENIED, "x")
    with pytest.raises(ValueError, match="not a 403"):
        AclDenied(AclErrorCode.SIGNATURE_INVALID, "x")


# --- secrets stay secret ---------------------------------------------------------------------


def test_secrets_never_show_in_repr_str_or_any_refusal(config: AclConfig) -> None:
    shown = [repr(config), str(config), repr(config.accounts["bob-bank"]), str(config.accounts)]
    assert all(SECRET not in text and ADMIN_SECRET not in text for text in shown)
    assert "12345678" not in repr(config)

    messages: list[str] = []
    refusals: list[dict[str, str]] = [
        _sign(secret="wrong-secret-1"),
        {**_sign(), "X-HalfMQ-Signature": "f" * 64},
        _sign(timestamp=str(NOW + 10**7)),
        {k: v for k, v in _sign().items() if k != "X-HalfMQ-Nonce"},
    ]
    for headers in refusals:
        refused = _refusal(headers, config)
        messages += [str(refused), repr(refused), refused.message, repr(refused.detail)]
    for needs, ip in [
        ((Need.admin(),), "10.10.103.7"),
        ((Need.topic("secret", Perm.SUB),), "1.1.1.1"),
    ]:
        refused_acl = _denied(config, "bob-bank", *needs, ip=ip)
        assert refused_acl is not None
        messages += [str(refused_acl), refused_acl.message, repr(refused_acl.detail)]
    files = [
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f'secretKey: "{SECRET}" oops'),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f"secretKey: [{SECRET}]"),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f"secretKey: {SECRET}\n    secretKey: x"),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f"secretKey: {SECRET}: {SECRET}"),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f"secretKey: {SECRET}\n\t"),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f'secretKey: "{SECRET}\x01"'),
        FULL_FILE.replace(f'secretKey: "{SECRET}"', f'secretKey: "{SECRET}\\q"'),
    ]
    for text in files:
        with pytest.raises(AclFileError) as raised:
            parse_acl(text, "plain_acl.yml")
        assert raised.value.__cause__ is None
        messages.append(str(raised.value))
    assert len(messages) == 4 * 4 + 2 * 3 + 7
    assert all(SECRET not in message for message in messages), messages


# --- the package -----------------------------------------------------------------------------


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(broker_service.acl).items()
        if not name.startswith("_") and not isinstance(value, type(broker_service.acl))
    }
    assert set(broker_service.acl.__all__) == public - {"annotations"}
    assert NeedKind.TOPIC == "TOPIC"


def test_the_example_file_of_the_docs_is_valid() -> None:
    docs = Path(__file__).parents[4] / "docs" / "acl.md"
    example = re.search(r"```yaml\n(.*?)```", docs.read_text(), re.DOTALL)
    assert example is not None
    config = parse_acl(example.group(1), "docs/acl.md")
    assert list(config.accounts) == ["bob-bank", "smith-bank", "operator"]
    assert config.accounts["bob-bank"].group_perms["bob-bank-tx"] is Perm.PUB
