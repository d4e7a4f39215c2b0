"""halfmq's ACL core: RocketMQ's ``plain_acl.yml`` accounts, signed requests, and the decision.

Pure and small, free of the web framework and of the store; the ASGI gate, the nonce table and
hot reload are built on it.  One idea per module: :mod:`~broker_service.acl.addresses` (white-list
patterns), :mod:`~broker_service.acl.model` (Perm, Account, AclConfig, Need),
:mod:`~broker_service.acl.file` (parse, load and dump the file), :mod:`~broker_service.acl.signature`
(the canonical request and its verifier), :mod:`~broker_service.acl.decide` (authorize) and
:mod:`~broker_service.acl.errors` (the refusals).  docs/acl.md is the user's guide.
"""

from broker_service.acl.addresses import AddressPattern, parse_address
from broker_service.acl.decide import authorize, group_of_topic, judged_as
from broker_service.acl.errors import (
    AclDenied,
    AclError,
    AclErrorCode,
    AclFileError,
    AclUnauthenticated,
)
from broker_service.acl.file import dump_acl, load_acl, parse_acl
from broker_service.acl.model import Account, AclConfig, Need, NeedKind, Perm
from broker_service.acl.signature import (
    SignedRequest,
    body_sha256,
    canonical_query,
    canonical_request,
    signature_of,
    verify,
)

__all__ = [
    "Account",
    "AclConfig",
    "AclDenied",
    "AclError",
    "AclErrorCode",
    "AclFileError",
    "AclUnauthenticated",
    "AddressPattern",
    "Need",
    "NeedKind",
    "Perm",
    "SignedRequest",
    "authorize",
    "body_sha256",
    "canonical_query",
    "canonical_request",
    "dump_acl",
    "group_of_topic",
    "judged_as",
    "load_acl",
    "parse_acl",
    "parse_address",
    "signature_of",
    "verify",
]
