"""The ACL's refusals, and the error of a malformed ACL file.

::

    AclError                      (status, code, message, detail): a request is refused
     +-- AclUnauthenticated       401: unsigned, unknown key, bad signature, skewed clock, replay
     +-- AclDenied                403: address not white-listed, permission missing

    AclFileError (ValueError)     the ACL file cannot be used: source, line, reason

Messages and details name the access key, the resource and the permission, never a secret
key nor the signature the broker expected.
"""

from __future__ import annotations

from typing import Any, ClassVar

# The codes are the wire contract's (docs/acl.md, "Errors"): one enum, with the status of each,
# for the broker that refuses and the client that reads the refusal.
from halfmq_wire.errors import AuthCode as AclErrorCode

__all__ = [
    "AclDenied",
    "AclError",
    "AclErrorCode",
    "AclFileError",
    "AclUnauthenticated",
]


class AclError(Exception):
    """A request the ACL refuses; ``status`` follows from ``code`` (a subclass's
    ``codes_status`` is the one status its codes may have)."""

    codes_status: ClassVar[int | None] = None

    def __init__(
        self, code: AclErrorCode, message: str, detail: dict[str, Any] | None = None
    ) -> None:
        if self.codes_status is not None and code.status != self.codes_status:
            raise ValueError(f"{code} is not a {self.codes_status} code")
        super().__init__(message)
        self.code = code
        self.status = code.status
        self.message = message
        self.detail: dict[str, Any] = dict(detail or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}, {self.message!r})"


class AclUnauthenticated(AclError):
    """401: the broker cannot tell who sent the request, or the request is not fresh."""

    codes_status = 401


class AclDenied(AclError):
    """403: the account is known and the signature good, but this request is not allowed."""

    codes_status = 403


class AclFileError(ValueError):
    """The ACL file is malformed: ``"<source>:<line>: <reason>"``."""

    def __init__(self, source: str, line: int | None, reason: str) -> None:
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason
