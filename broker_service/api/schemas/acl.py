"""The ACL administration of the REST contract (docs/acl.md): accounts and white lists, never a
secret in an answer."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictBool

from broker_service.api.schemas.common import Strict


class AccountOut(BaseModel):
    access_key: str
    admin: bool
    white_remote_address: str | None
    default_topic_perm: str
    default_group_perm: str
    topic_perms: list[str] = Field(description="name=PERM, as in plain_acl.yml")
    group_perms: list[str]


class AclOut(BaseModel):
    version: str
    global_white_remote_addresses: list[str]
    accounts: list[AccountOut]


class VersionOut(BaseModel):
    version: str


class AccountIn(Strict):
    """mqadmin updateAccessConfig: only the fields given change; a new account needs its secret."""

    secret_key: str | None = Field(None, min_length=7, max_length=256)
    admin: StrictBool | None = None
    white_remote_address: str | None = Field(None, description="'' removes it")
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = Field(None, description='["topicA=DENY", "topicB=PUB|SUB"]')
    group_perms: list[str] | None = None


class GlobalWhiteIn(Strict):
    addresses: list[str] = Field(max_length=1000)
