"""Who calls: a gRPC call's metadata read once, and its MQv2-HMAC-SHA1 signature checked against the
ACL's accounts (``plain_acl.yml``, the same as REST's).

RocketMQ 5's clients send, on every call::

    authorization: MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX
    x-mq-date-time: 20260101T120000Z

``HEX`` is ``hex(HMAC-SHA1(secret, x-mq-date-time))``: the scheme signs a date and nothing else --
no body, no method, no nonce -- so it proves that the caller knows the secret, and a captured
header can be replayed.  The broker accepts it beyond loopback only over TLS (unless
``grpc_allow_insecure``), where no one can capture it.

The clock rule: the Python and Java clients write their *local* time with a ``Z`` suffix, so a
client in UTC+2 says 14:00Z at 12:00 UTC.  The date is accepted when it is the broker's time in
some time zone -- it differs from UTC now by a whole number of quarter hours between -14 h and
+14 h, give or take ``acl_window_seconds`` -- and refused otherwise (UNAUTHORIZED).  A replay
guard it never was; the rule keeps a header from another day useless.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha1
from typing import Any

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclErrorCode, AclUnauthenticated
from broker_service.acl.model import AclConfig, Need

_QUARTER_HOUR_MS = 15 * 60 * 1000
_MAX_ZONE_MS = 14 * 60 * 60 * 1000
_AUTHORIZATION = re.compile(
    r"MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,\s]+),\s*SignedHeaders=(?P<headers>[^,\s]+),"
    r"\s*Signature=(?P<signature>[0-9A-Fa-f]+)\s*$"
)


@dataclass(frozen=True, slots=True)
class Caller:
    """What a call's metadata says of its client (any of it may be missing)."""

    client_id: str
    language: str
    version: str
    address: str  # the peer's IP
    authorization: str
    date_time: str
    access_key: str | None = None  # set once the signature is checked

    @classmethod
    def of(cls, metadata: Iterable[tuple[str, Any]], peer: str) -> Caller:
        fields = {key.lower(): value for key, value in metadata if isinstance(value, str)}
        return cls(
            client_id=fields.get("x-mq-client-id", ""),
            language=fields.get("x-mq-language", ""),
            version=fields.get("x-mq-client-version", ""),
            address=peer_address(peer),
            authorization=fields.get("authorization", ""),
            date_time=fields.get("x-mq-date-time", ""),
        )

    def __repr__(self) -> str:  # the authorization header is kept out of every log line
        return f"Caller({self.client_id!r}, {self.language} {self.version}, {self.address})"


def peer_address(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``; ``ipv6:[::1]:5000`` -> ``::1``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest or peer


class Authenticator:
    """Checks a call's signature and the ACL's needs; ``config`` is read per call, so that a hot
    reload of the file applies at once."""

    def __init__(
        self, config: Callable[[], AclConfig], clock: Callable[[], int], window_ms: int
    ) -> None:
        self.config = config
        self.clock = clock
        self.window_ms = window_ms

    def signer(self, caller: Caller) -> str:
        """The access key that signed the call; :class:`AclUnauthenticated` if none did."""
        match = _AUTHORIZATION.match(caller.authorization.strip())
        if match is None:
            raise AclUnauthenticated(
                AclErrorCode.SIGNATURE_MISSING,
                "no MQv2-HMAC-SHA1 authorization: set the client's credentials (access key and "
                "secret key of the broker's ACL file)",
            )
        access_key = match["ak"]
        secret = self.config().secret_for(access_key)
        if secret is None:
            raise AclUnauthenticated(
                AclErrorCode.ACCESS_KEY_UNKNOWN,
                f"access key {access_key!r} is unknown to this broker",
                {"access_key": access_key},
            )
        if match["headers"].lower() != "x-mq-date-time" or not caller.date_time:
            raise AclUnauthenticated(
                AclErrorCode.SIGNATURE_INVALID, "the signature must cover x-mq-date-time"
            )
        expected = hmac.new(secret.encode(), caller.date_time.encode(), sha1).hexdigest()
        if not hmac.compare_digest(expected, match["signature"].lower()):
            raise AclUnauthenticated(
                AclErrorCode.SIGNATURE_INVALID,
                f"the signature of access key {access_key!r} does not match (wrong secret key?)",
                {"access_key": access_key},
            )
        self._check_clock(caller.date_time)
        return access_key

    def _check_clock(self, date_time: str) -> None:
        try:
            stated = datetime.strptime(date_time, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise AclUnauthenticated(
                AclErrorCode.TIMESTAMP_SKEWED,
                f"x-mq-date-time {date_time!r} is not yyyyMMdd'T'HHmmss'Z'",
            ) from None
        skew = int(stated.timestamp() * 1000) - self.clock()
        zone = round(skew / _QUARTER_HOUR_MS) * _QUARTER_HOUR_MS
        if abs(zone) > _MAX_ZONE_MS or abs(skew - zone) > self.window_ms:
            raise AclUnauthenticated(
                AclErrorCode.TIMESTAMP_SKEWED,
                f"x-mq-date-time {date_time!r} is not the broker's current time in any time "
                f"zone (within {self.window_ms // 1000} s)",
            )

    def authorize(self, caller: Caller, needs: Iterable[Need]) -> str:
        """The caller's access key once its signature holds and its account may do ``needs``;
        raises :class:`~broker_service.acl.errors.AclError` otherwise."""
        access_key = self.signer(caller)
        authorize(self.config(), access_key, caller.address, needs)
        return access_key
