"""The client's signer against the broker's verifier, and the broker's signer (push checks)
against the framework's verifier: two implementations of one documented form, each checking the
other."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from broker_service.acl.errors import AclErrorCode, AclUnauthenticated
from broker_service.acl.signature import (
    SIGNATURE_HEADER as SIGNATURE,
)
from broker_service.acl.signature import (
    SignedRequest,
    canonical_request,
    signature_of,
    verify,
)
from broker_service.acl.signature import sign as broker_sign
from framework.errors import ConfigurationError, SignatureRejected
from framework.signing import (
    CheckVerifier,
    Credentials,
    HalfmqAuth,
    SignedCheck,
    sign_headers,
    verify_headers,
)
from framework.signing import canonical_request as framework_canonical

CREDENTIALS = Credentials("bob-bank", "bob-bank-secret-2026")
SECRETS = {CREDENTIALS.access_key: CREDENTIALS.secret_key}
NOW = 1_767_225_600_000
NONCE = "f7c1b0b4d2a94e0e"


def broker_verifies(
    headers: httpx.Headers | dict[str, str],
    method: str,
    path: str,
    raw_query: str,
    body: bytes,
    now_ms: int = NOW,
) -> SignedRequest:
    digest = hashlib.sha256(body).hexdigest()
    return verify(dict(headers), method, path, raw_query, digest, now_ms, SECRETS.get)


# docs/acl.md's worked examples: a client in another language checks itself against these.
WORKED_EXAMPLES = [
    (
        "POST",
        "/v1/topics/transfers/messages",
        "",
        b'{"body":"Bob pays Smith 100","keys":["order-188"]}',
        "2f8a14b9fb2cf4720e65a5742a9c27b27ae2b2e04b65a505184e781add07c876",
    ),
    (
        "GET",
        "/v1/messages",
        "topic=transfers&key=order-188&limit=32&begin=2026-01-01T00%3A00%3A00Z",
        b"",
        "58ff473d674fc37b75e009db4a0c726eece7a03e00daac5d3abda9274fa94416",
    ),
]


@pytest.mark.parametrize(("method", "path", "query", "body", "signature"), WORKED_EXAMPLES)
def test_the_documented_worked_examples(
    method: str, path: str, query: str, body: bytes, signature: str
) -> None:
    headers = sign_headers(CREDENTIALS, method, path, query, body, now_ms=NOW, nonce=NONCE)
    assert headers == {
        "Authorization": "HALFMQ-HMAC-SHA256 AccessKey=bob-bank, Timestamp=1767225600000, "
        f"Nonce={NONCE}, Signature={signature}"
    }
    assert broker_verifies(headers, method, path, query, body) == SignedRequest(
        "bob-bank", NOW, NONCE
    )
    # the earlier form, the same four values in four headers, is still accepted
    four = {
        "X-HalfMQ-AccessKey": "bob-bank",
        "X-HalfMQ-Timestamp": "1767225600000",
        "X-HalfMQ-Nonce": NONCE,
        "X-HalfMQ-Signature": signature,
    }
    assert broker_verifies(four, method, path, query, body) == SignedRequest("bob-bank", NOW, NONCE)
    assert verify_headers(CREDENTIALS, four, method, path, query, body, now_ms=NOW)


def authorization(values: list[str], separator: str = ", ") -> dict[str, str]:
    fields = zip(("AccessKey", "Timestamp", "Nonce", "Signature"), values, strict=True)
    return {"authorization": "HALFMQ-HMAC-SHA256 " + separator.join(f"{k}={v}" for k, v in fields)}


def test_the_authorization_header_is_checked_field_by_field_on_both_sides() -> None:
    request = ("POST", "/v1/topics/transfers/messages", "", b"{}")
    header = sign_headers(CREDENTIALS, *request, now_ms=NOW, nonce=NONCE)["Authorization"]
    values = [part.split("=", 1)[1] for part in header.split(" ", 1)[1].split(", ")]
    assert broker_verifies(authorization(values, ","), *request).nonce == NONCE  # "," alone
    for index, name, bad in [
        (1, "Timestamp", "1767225600.5"),
        (2, "Nonce", "short"),
        (3, "Signature", "F" * 64),
    ]:
        malformed = authorization([*values[:index], bad, *values[index + 1 :]])
        with pytest.raises(AclUnauthenticated) as raised:
            broker_verifies(malformed, *request)
        assert raised.value.code is AclErrorCode.SIGNATURE_INVALID
        assert raised.value.detail == {"header": f"Authorization {name}"}
        assert rejected(malformed, *request).detail == {"header": f"Authorization {name}"}
    empty = authorization(["", *values[1:]])
    with pytest.raises(AclUnauthenticated) as raised:
        broker_verifies(empty, *request)
    assert raised.value.code is AclErrorCode.SIGNATURE_MISSING
    assert raised.value.detail == {"missing": ["Authorization AccessKey"]}
    assert rejected(empty, *request).code == "SIGNATURE_MISSING"
    # fields out of order, or one left out: the header is malformed as a whole
    shuffled = {"authorization": header.replace("AccessKey=", "Key=")}
    with pytest.raises(AclUnauthenticated) as raised:
        broker_verifies(shuffled, *request)
    assert (raised.value.code, raised.value.detail) == (
        AclErrorCode.SIGNATURE_INVALID,
        {"header": "Authorization"},
    )
    assert rejected(shuffled, *request).code == "SIGNATURE_INVALID"


def test_another_authorization_scheme_is_no_signature() -> None:
    request = ("GET", "/v1/topics", "", b"")
    with pytest.raises(AclUnauthenticated) as raised:
        broker_verifies({"Authorization": "Bearer abc.def"}, *request)
    assert raised.value.code is AclErrorCode.SIGNATURE_MISSING
    assert raised.value.detail == {"missing": ["Authorization"]}
    assert "Authorization: HALFMQ-HMAC-SHA256" in raised.value.message
    # ... and does not hide a signature in the four headers of the earlier form
    four = broker_signed_headers(*request)
    signed = broker_verifies({"Authorization": "Bearer abc.def", **four}, *request)
    assert signed.nonce == NONCE


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("post", "/v1/transactions", ""),
        ("GET", "/v1/transactions", "state=PREPARED&producer_group=bob-bank-tx&limit=10"),
        ("GET", "/v1/messages", "key=a%20b&key=a+b&topic=t&z&e=x=y&%C3%A9=%C3%A9"),
        ("DELETE", "/v1/topics/t%2Dx", "&&a=1&"),
    ],
)
def test_signed_headers_verify_at_the_broker(method: str, path: str, query: str) -> None:
    body = '{"topic":"transfers","body":"été"}'.encode()
    headers = sign_headers(CREDENTIALS, method, path, query, body, now_ms=NOW)
    signed = broker_verifies(headers, method, path, query, body)
    assert signed.access_key == "bob-bank"
    assert len(signed.nonce) == 24  # secrets.token_urlsafe(18)


def test_each_request_gets_a_fresh_nonce_and_the_current_time() -> None:
    first = sign_headers(CREDENTIALS, "GET", "/v1/topics", "", b"")
    second = sign_headers(CREDENTIALS, "GET", "/v1/topics", "", b"")
    assert first["Authorization"].split("Nonce=")[1] != second["Authorization"].split("Nonce=")[1]
    now = int(first["Authorization"].split("Timestamp=")[1].split(",")[0])
    assert broker_verifies(first, "GET", "/v1/topics", "", b"", now_ms=now)


def test_a_bad_nonce_is_refused_before_signing() -> None:
    with pytest.raises(ValueError, match="8-128 characters"):
        sign_headers(CREDENTIALS, "GET", "/v1/topics", "", b"", nonce="no spaces allowed")


def test_the_broker_refuses_what_the_client_signed_for_another_request() -> None:
    headers = sign_headers(CREDENTIALS, "GET", "/v1/topics", "a=1", b"", now_ms=NOW)
    with pytest.raises(AclUnauthenticated) as raised:
        broker_verifies(headers, "GET", "/v1/topics", "a=2", b"")
    assert raised.value.code is AclErrorCode.SIGNATURE_INVALID


class Capture:
    """httpx's own transport API used only to capture what the client puts on the wire."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json={"ok": True})


def verified_on_the_wire(request: httpx.Request, now_ms: int) -> SignedRequest:
    path, _, query = request.url.raw_path.decode("ascii").partition("?")
    return broker_verifies(request.headers, request.method, path, query, request.content, now_ms)


def test_auth_signs_every_request_of_a_client() -> None:
    capture = Capture()
    auth = HalfmqAuth(CREDENTIALS)
    with httpx.Client(
        base_url="http://broker:9876", auth=auth, transport=httpx.MockTransport(capture)
    ) as client:
        client.post("/v1/topics/transfers/messages", json={"body": "été", "keys": ["o-1"]})
        client.get("/v1/messages", params={"topic": "transfers", "key": "a b+c", "limit": 5})
        client.delete("/v1/topics/old-topic")

        def chunks() -> Iterator[bytes]:
            yield b'{"body":'
            yield b'"streamed"}'

        client.post("/v1/transactions", content=chunks())
    assert len(capture.requests) == 4
    now = time.time_ns() // 1_000_000
    for request in capture.requests:
        signed = verified_on_the_wire(request, now)
        assert signed.access_key == "bob-bank"
        assert abs(signed.timestamp_ms - now) < 60_000  # the real clock by default
    assert capture.requests[3].content == b'{"body":"streamed"}'


async def test_auth_signs_every_request_of_an_async_client() -> None:
    capture = Capture()
    now = NOW + 42
    auth = HalfmqAuth(CREDENTIALS, clock_ms=lambda: now)
    async with httpx.AsyncClient(
        base_url="http://broker:9876", auth=auth, transport=httpx.MockTransport(capture)
    ) as client:
        await client.post("/v1/consumer-groups/smith/receive", json={"client_id": "c-1"})
        await client.get("/v1/transactions", params={"state": "PREPARED", "limit": 3})
    assert len(capture.requests) == 2
    for request in capture.requests:
        signed = verified_on_the_wire(request, now)
        assert signed.timestamp_ms == now


def test_from_env_reads_both_keys() -> None:
    environ = {"HALFMQ_ACCESS_KEY": "bob-bank", "HALFMQ_SECRET_KEY": "bob-bank-secret-2026"}
    assert Credentials.from_env(environ) == CREDENTIALS
    assert Credentials.from_env({}) is None
    assert Credentials.from_env({"HALFMQ_ACCESS_KEY": "", "HALFMQ_SECRET_KEY": ""}) is None
    with pytest.raises(ConfigurationError, match="both an access key and a secret key"):
        Credentials("bob-bank", "")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"HALFMQ_ACCESS_KEY": "bob-bank"},
            "HALFMQ_ACCESS_KEY is set but HALFMQ_SECRET_KEY is not",
        ),
        (
            {"HALFMQ_SECRET_KEY": "bob-bank-secret-2026"},
            "HALFMQ_SECRET_KEY is set but HALFMQ_ACCESS_KEY is not",
        ),
    ],
)
def test_from_env_refuses_one_key_without_the_other(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        Credentials.from_env(environ)
    assert "bob-bank-secret-2026" not in str(raised.value)


def test_the_secret_never_shows() -> None:
    shown = [repr(CREDENTIALS), str(CREDENTIALS), repr(HalfmqAuth(CREDENTIALS).__dict__)]
    assert all("bob-bank-secret-2026" not in text for text in shown)
    assert "bob-bank" in repr(CREDENTIALS)


# -- the other direction: the broker signs (push checks), the framework verifies ----------------


def broker_signed_headers(
    method: str, path: str, query: str, body: bytes, now_ms: int = NOW, nonce: str = NONCE
) -> dict[str, str]:
    """Headers built from the broker's canonical form and HMAC, not the framework's."""
    canonical = canonical_request(
        method, path, query, hashlib.sha256(body).hexdigest(), str(now_ms), nonce, "bob-bank"
    )
    return {
        "X-HalfMQ-AccessKey": "bob-bank",
        "X-HalfMQ-Timestamp": str(now_ms),
        "X-HalfMQ-Nonce": nonce,
        "X-HalfMQ-Signature": signature_of(CREDENTIALS.secret_key, canonical),
    }


def rejected(headers: dict[str, str], *request: Any, now_ms: int = NOW) -> SignatureRejected:
    with pytest.raises(SignatureRejected) as raised:
        verify_headers(CREDENTIALS, headers, *request, now_ms=now_ms)
    assert raised.value.status == 401
    assert CREDENTIALS.secret_key not in f"{raised.value} {raised.value.detail}"
    return raised.value


@pytest.mark.parametrize(("method", "path", "query", "body", "signature"), WORKED_EXAMPLES)
def test_the_worked_examples_verify_in_the_framework(
    method: str, path: str, query: str, body: bytes, signature: str
) -> None:
    headers = broker_signed_headers(method, path, query, body)
    assert headers["X-HalfMQ-Signature"] == signature
    signed = verify_headers(CREDENTIALS, headers, method, path, query, body, now_ms=NOW)
    assert signed == SignedCheck("bob-bank", NOW, NONCE)


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("POST", "/halfmq/check", ""),
        ("POST", "/bob/halfmq/check", "instance=a%20b&instance=a+b&z&e=x=y&%C3%A9=%C3%A9"),
        ("post", "/halfmq/check%2Fv2", "&&a=1&"),
    ],
)
def test_what_the_broker_signs_verifies_in_the_framework(
    method: str, path: str, query: str
) -> None:
    body = '{"transaction_id":"tx-1","body":"été"}'.encode()
    headers = broker_signed_headers(method, path, query, body)
    assert verify_headers(CREDENTIALS, headers, method, path, query, body, now_ms=NOW)
    # and the framework's own canonical form is the broker's, line for line
    assert framework_canonical(method, path, query, body, str(NOW), NONCE, "bob-bank") == (
        canonical_request(
            method, path, query, hashlib.sha256(body).hexdigest(), str(NOW), NONCE, "bob-bank"
        )
    )


def test_a_push_check_the_broker_signs_verifies_in_the_framework() -> None:
    url = "http://10.0.0.7:8000/halfmq/check?instance=bob%201"
    body = b'{"transaction_id":"tx-1"}'
    headers = broker_sign("bob-bank", CREDENTIALS.secret_key, "POST", url, body, NOW)
    signed = verify_headers(
        CREDENTIALS, headers, "POST", "/halfmq/check", "instance=bob%201", body, now_ms=NOW
    )
    assert signed.access_key == "bob-bank"
    assert signed.timestamp_ms == NOW


def test_what_the_framework_signs_it_verifies() -> None:
    headers = sign_headers(CREDENTIALS, "POST", "/halfmq/check", "a=1", b"{}", now_ms=NOW)
    assert verify_headers(CREDENTIALS, headers, "POST", "/halfmq/check", "a=1", b"{}", now_ms=NOW)


def test_each_refusal_has_the_broker_code() -> None:
    request = ("POST", "/halfmq/check", "", b"{}")
    good = broker_signed_headers(*request)
    missing = rejected({k: v for k, v in good.items() if k != "X-HalfMQ-Signature"}, *request)
    assert (missing.code, missing.detail) == ("SIGNATURE_MISSING", {"missing": [SIGNATURE]})
    for header, value in [
        ("X-HalfMQ-Timestamp", "1767225600.5"),
        ("X-HalfMQ-Nonce", "short"),
        ("X-HalfMQ-Signature", "F" * 64),
    ]:
        malformed = rejected({**good, header: value}, *request)
        assert (malformed.code, malformed.detail) == ("SIGNATURE_INVALID", {"header": header})
    other = Credentials("smith-bank", CREDENTIALS.secret_key)
    stranger = rejected(sign_headers(other, *request, now_ms=NOW), *request)
    assert (stranger.code, stranger.detail) == ("ACCESS_KEY_UNKNOWN", {"access_key": "smith-bank"})
    assert rejected(good, "POST", "/halfmq/check", "", b"{ }").code == "SIGNATURE_INVALID"
    assert rejected(good, "PUT", "/halfmq/check", "", b"{}").code == "SIGNATURE_INVALID"


def test_the_window_is_inclusive_and_checked_after_the_signature() -> None:
    request = ("POST", "/halfmq/check", "", b"{}")
    headers = broker_signed_headers(*request)
    for now in (NOW - 300_000, NOW + 300_000):
        assert verify_headers(CREDENTIALS, headers, *request, now_ms=now)
    skewed = rejected(headers, *request, now_ms=NOW - 300_001)
    assert skewed.code == "TIMESTAMP_SKEWED"
    assert skewed.detail == {
        "producer_time_ms": NOW - 300_001,
        "request_time_ms": NOW,
        "skew_seconds": 300.001,
        "window_seconds": 300.0,
    }
    forged = {**headers, "X-HalfMQ-Signature": "0" * 64}
    assert rejected(forged, *request, now_ms=NOW - 900_000).code == "SIGNATURE_INVALID"


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_the_check_verifier_refuses_a_replay_inside_the_window() -> None:
    clock = Clock()
    verifier = CheckVerifier(CREDENTIALS, clock_ms=clock)
    request = ("POST", "/halfmq/check", "", b"{}")
    headers = broker_signed_headers(*request)
    assert verifier.verify(headers, *request).nonce == NONCE
    with pytest.raises(SignatureRejected) as raised:
        verifier.verify(headers, *request)
    assert raised.value.code == "NONCE_REPLAYED"
    clock.now = NOW + 300_001  # past the window the replay is refused for its age instead
    with pytest.raises(SignatureRejected) as raised:
        verifier.verify(headers, *request)
    assert raised.value.code == "TIMESTAMP_SKEWED"
    fresh = broker_signed_headers(*request, now_ms=clock.now, nonce="another-nonce")
    assert verifier.verify(fresh, *request).nonce == "another-nonce"


def test_the_check_verifier_remembers_a_bounded_number_of_nonces() -> None:
    verifier = CheckVerifier(CREDENTIALS, clock_ms=Clock(), max_nonces=2)
    request = ("POST", "/halfmq/check", "", b"{}")
    first, second, third = (
        broker_signed_headers(*request, now_ms=NOW + n, nonce=f"nonce-{n:04d}") for n in range(3)
    )
    for headers in (first, second, third):
        verifier.verify(headers, *request)
    for kept in (second, third):
        with pytest.raises(SignatureRejected, match="already used"):
            verifier.verify(kept, *request)
    verifier.verify(first, *request)  # the soonest to expire was forgotten to make room


def test_a_refused_check_never_names_the_secret() -> None:
    verifier = CheckVerifier(CREDENTIALS)
    request = ("POST", "/halfmq/check", "", b"{}")
    forged = sign_headers(Credentials("bob-bank", "guessed-secret"), *request)
    with pytest.raises(SignatureRejected) as raised:
        verifier.verify(forged, *request)
    shown = f"{raised.value} {raised.value!r} {raised.value.envelope()}"
    assert CREDENTIALS.secret_key not in shown
    assert "guessed-secret" not in shown
    assert "bob-bank-secret-2026" not in repr(verifier.__dict__)
