"""``/v1/acl``: RocketMQ's mqadmin ACL commands over REST (admin only; ``halfmq acl`` calls them).

A change is applied to the version this broker enforces, written to its ACL file and published
to the store, so every broker sharing the database enforces it within a reload interval.  No answer
ever carries a secret key.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from broker_service.acl.addresses import parse_address
from broker_service.acl.model import Account, AclConfig, Perm
from broker_service.acl.runtime import AclRuntime
from broker_service.api import permissions as rules
from broker_service.api.deps import nonce_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.permissions import needs
from broker_service.api.schemas.acl import AccountIn, AccountOut, AclOut, GlobalWhiteIn, VersionOut
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound

router = APIRouter(prefix="/v1/acl", tags=["acl"], responses=ERROR_RESPONSES)

AccessKey = Annotated[str, Path(min_length=7, max_length=128, pattern=r"^[A-Za-z0-9_.@-]+$")]


def _runtime(request: Request) -> AclRuntime:
    acl: AclRuntime | None = request.app.state.acl
    if acl is None:
        raise Conflict(
            "this broker runs without an ACL (start it with --acl PATH)", code="ACL_DISABLED"
        )
    return acl


def _account_out(account: Account) -> AccountOut:
    return AccountOut(
        access_key=account.access_key,
        admin=account.admin,
        white_remote_address=account.white_remote_address.text
        if account.white_remote_address
        else None,
        default_topic_perm=account.default_topic_perm.label,
        default_group_perm=account.default_group_perm.label,
        topic_perms=[f"{name}={perm.label}" for name, perm in account.topic_perms.items()],
        group_perms=[f"{name}={perm.label}" for name, perm in account.group_perms.items()],
    )


def _acl_out(config: AclConfig) -> AclOut:
    return AclOut(
        version=config.version,
        global_white_remote_addresses=[p.text for p in config.global_white_remote_addresses],
        accounts=[_account_out(a) for a in config.accounts.values()],
    )


@router.get("", response_model=AclOut)
@needs(rules.admin)
async def show(request: Request) -> AclOut:
    """The enforced version: accounts and white lists, never a secret (mqadmin getAclConfig)."""
    return _acl_out(_runtime(request).config)


@router.get("/version", response_model=VersionOut)
@needs(rules.admin)
async def version(request: Request) -> VersionOut:
    """The enforced version (mqadmin clusterAclConfigVersion)."""
    return VersionOut(version=_runtime(request).config.version)


def _perms(entries: list[str], what: str) -> dict[str, Perm]:
    perms: dict[str, Perm] = {}
    for entry in entries:
        name, sep, text = entry.partition("=")
        if not sep or not name.strip():
            raise InvalidRequest(f"{what} entry {entry!r} is not name=PERM", code="INVALID_ACL")
        perms[name.strip()] = _perm(text.strip(), f"{what} {name.strip()}")
    return perms


def _perm(text: str, what: str) -> Perm:
    try:
        return Perm.parse(text)
    except ValueError as exc:
        raise InvalidRequest(f"{what}: {exc}", code="INVALID_ACL") from None


def _updated(old: Account | None, access_key: str, body: AccountIn) -> Account:
    if old is None and body.secret_key is None:
        raise InvalidRequest("a new account needs its secret_key", code="INVALID_ACL")
    changes: dict[str, object] = {}
    if body.secret_key is not None:
        changes["secret_key"] = body.secret_key
    if body.admin is not None:
        changes["admin"] = body.admin
    if body.white_remote_address is not None:
        text = body.white_remote_address.strip()
        try:
            changes["white_remote_address"] = parse_address(text) if text else None
        except ValueError as exc:
            raise InvalidRequest(f"whiteRemoteAddress: {exc}", code="INVALID_ACL") from None
    for name in ("default_topic_perm", "default_group_perm"):
        value = getattr(body, name)
        if value is not None:
            changes[name] = _perm(value, name)
    if body.topic_perms is not None:
        changes["topic_perms"] = _perms(body.topic_perms, "topicPerms")
    if body.group_perms is not None:
        changes["group_perms"] = _perms(body.group_perms, "groupPerms")
    try:
        if old is None:
            return Account(access_key=access_key, **changes)  # type: ignore[arg-type]
        return replace(old, **changes)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="INVALID_ACL") from None


@router.put("/accounts/{access_key}", response_model=AccountOut)
@needs(rules.admin)
async def update_account(access_key: AccessKey, body: AccountIn, request: Request) -> AccountOut:
    """Create or change an account (mqadmin updateAccessConfig)."""
    acl = _runtime(request)
    account = _updated(acl.config.account(access_key), access_key, body)
    await acl.update(lambda config: config.with_account(account), nonce=nonce_of(request))
    return _account_out(account)


@router.delete("/accounts/{access_key}", status_code=status.HTTP_204_NO_CONTENT)
@needs(rules.admin)
async def delete_account(access_key: AccessKey, request: Request) -> Response:
    """Remove an account (mqadmin deleteAccessConfig)."""
    acl = _runtime(request)
    if acl.config.account(access_key) is None:
        raise NotFound(f"account {access_key!r} does not exist", code="ACCOUNT_NOT_FOUND")
    await acl.update(lambda config: config.without_account(access_key), nonce=nonce_of(request))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/global-white", response_model=AclOut)
@needs(rules.admin)
async def update_global_white(body: GlobalWhiteIn, request: Request) -> AclOut:
    """Replace the global white list (mqadmin updateGlobalWhiteAddr)."""
    acl = _runtime(request)
    try:
        patterns = [parse_address(a) for a in body.addresses]
    except ValueError as exc:
        raise InvalidRequest(f"globalWhiteRemoteAddresses: {exc}", code="INVALID_ACL") from None
    nonce = nonce_of(request)
    config = await acl.update(lambda config: config.with_global_white(patterns), nonce=nonce)
    return _acl_out(config)
