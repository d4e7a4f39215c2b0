"""Security primitives come from the standard library (issue 32, item 1): the request signature
both sides use is the wire contract's, ``hmac``'s HMAC-SHA256, and no product code builds an HMAC
by hand."""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path

from broker_service.acl.signature import sign
from framework.signing import Credentials, sign_headers
from halfmq_wire.signature import (
    AUTHORIZATION,
    body_sha256,
    canonical_request,
    signature_of,
)

ROOT = Path(__file__).parents[2]
PRODUCT = ("broker_service", "framework", "halfmq", "halfmq_wire", "demo_bank", "spark_reconcile")


def test_the_contracts_signature_is_the_standard_librarys_hmac() -> None:
    for length in (7, 32, 63, 64, 65, 200):  # around SHA-256's block: a long key is hashed first
        secret = ("k3y-" * 60)[:length]
        for canonical in ("", "POST\n/v1/transactions\n\nabc", "ünïcode\n" * 40):
            expected = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
            assert signature_of(secret, canonical) == expected


def test_both_sides_sign_with_the_contracts_hmac() -> None:
    secret, body, nonce, now = "s3cret-of-bob", b'{"a":1}', "nonce-0001", 1_767_225_600_000
    canonical = canonical_request(
        "POST", "/halfmq/check", "i=1", body_sha256(body), str(now), nonce, "bob"
    )
    expected = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
    client = sign_headers(
        Credentials("bob", secret), "POST", "/halfmq/check", "i=1", body, now, nonce
    )
    assert client[AUTHORIZATION].endswith(f"Signature={expected}")
    broker = sign("bob", secret, "POST", "http://127.0.0.1:1/halfmq/check?i=1", body, now)
    timestamp_nonce = broker[AUTHORIZATION].split("Nonce=")[1].split(",")[0]
    again = canonical_request(
        "POST", "/halfmq/check", "i=1", body_sha256(body), str(now), timestamp_nonce, "bob"
    )
    assert broker[AUTHORIZATION].endswith(f"Signature={signature_of(secret, again)}")


def test_no_product_code_builds_an_hmac_from_ipad_and_opad() -> None:
    by_hand = re.compile(r"0x36|0x5[cC]|\bipad\b|\bopad\b", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for part in PRODUCT
        for path in (ROOT / part).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert found == []
