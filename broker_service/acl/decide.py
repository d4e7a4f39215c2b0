"""May this account, from this address, do what the route needs?

The order of the questions: is the access key known (401 ``ACCESS_KEY_UNKNOWN``), is the address
in the global white list when there is one, and in the account's own when it has one (403
``ADDRESS_NOT_ALLOWED``), then each need (403 ``PERMISSION_DENIED``).  White lists only narrow:
they never stand in for the signature, which is checked before (:mod:`.signature`).

An admin account may do everything.  Otherwise a resource named in ``topicPerms`` or
``groupPerms`` is judged by that entry, an explicit ``DENY`` included, and any other by the
account's default.  A need on a retry or DLQ topic (``%RETRY%g``, ``%DLQ%g``) is judged as the
same permission on its group ``g``, as RocketMQ does.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker_service.acl.errors import AclDenied, AclErrorCode, AclUnauthenticated
from broker_service.acl.model import Account, AclConfig, Need, NeedKind
from broker_service.domain.names import DLQ_PREFIX, RETRY_PREFIX


def authorize(config: AclConfig, access_key: str, remote_addr: str, needs: Iterable[Need]) -> None:
    """Returns when allowed; raises :class:`AclUnauthenticated` or :class:`AclDenied` if not.

    No needs at all: any known account from an allowed address (a request whose resource is not
    known yet, say an unknown transaction id, that the route then answers 404 or 422)."""
    needed = [judged_as(need) for need in needs]
    if needed and all(need.kind is NeedKind.PUBLIC for need in needed):
        return
    account = config.account(access_key)
    if account is None:
        raise AclUnauthenticated(
            AclErrorCode.ACCESS_KEY_UNKNOWN,
            f"access key {access_key!r} is unknown to this broker",
            {"access_key": access_key},
        )
    _check_address(config, account, remote_addr)
    if account.admin:
        return
    for need in needed:
        _check_need(account, need)


def judged_as(need: Need) -> Need:
    """A need on ``%RETRY%g`` or ``%DLQ%g`` becomes the same need on group ``g``."""
    if need.kind is NeedKind.TOPIC and need.resource is not None:
        group = group_of_topic(need.resource)
        if group is not None:
            return Need.group(group, need.perm)
    return need


def group_of_topic(topic: str) -> str | None:
    """The consumer group a retry or DLQ topic belongs to; None for any other topic."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return topic[len(prefix) :]
    return None


def _check_address(config: AclConfig, account: Account, remote_addr: str) -> None:
    white = config.global_white_remote_addresses
    if white and not any(pattern.matches(remote_addr) for pattern in white):
        raise AclDenied(
            AclErrorCode.ADDRESS_NOT_ALLOWED,
            f"address {remote_addr!r} is not in the broker's global white list",
            {"remote_address": remote_addr},
        )
    own = account.white_remote_address
    if own is not None and not own.matches(remote_addr):
        raise AclDenied(
            AclErrorCode.ADDRESS_NOT_ALLOWED,
            f"access key {account.access_key!r} may not be used from address {remote_addr!r}",
            {"remote_address": remote_addr, "access_key": account.access_key},
        )


def _check_need(account: Account, need: Need) -> None:
    if need.kind is NeedKind.PUBLIC:
        return
    if need.kind is NeedKind.ADMIN:
        raise AclDenied(
            AclErrorCode.PERMISSION_DENIED,
            f"access key {account.access_key!r} is not an admin account",
            {"access_key": account.access_key, "needs": "admin"},
        )
    assert need.resource is not None  # Need.topic and Need.group always name one
    owned = account.perm_on(need.kind, need.resource)
    if need.perm not in owned:
        raise AclDenied(
            AclErrorCode.PERMISSION_DENIED,
            f"access key {account.access_key!r} lacks {need}",
            {
                "access_key": account.access_key,
                "resource_type": need.kind.value,
                "resource": need.resource,
                "needs": need.perm.label,
                "has": owned.label,
            },
        )
