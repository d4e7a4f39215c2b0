"""Security primitives come from the standard library (issue 32, item 1): both sides' request
signature is ``hmac``'s HMAC-SHA256, and no product code builds an HMAC by hand."""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path

from broker_service.acl.signature import signature_of
from framework.signing import Credentials, _signature

ROOT = Path(__file__).parents[1]
PRODUCT = ("broker_service", "framework", "halfmq", "demo_bank", "spark_reconcile")


def test_both_sides_sign_with_the_standard_librarys_hmac() -> None:
    for length in (7, 32, 63, 64, 65, 200):  # around SHA-256's block: a long key is hashed first
        secret = ("k3y-" * 60)[:length]
        for canonical in ("", "POST\n/v1/transactions\n\nabc", "ünïcode\n" * 40):
            expected = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
            assert signature_of(secret, canonical) == expected
            assert _signature(Credentials("access-key", secret), canonical) == expected


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
