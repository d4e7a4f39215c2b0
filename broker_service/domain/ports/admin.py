"""The store's admin role: the ACL's signed-request nonces and its published versions
(:mod:`broker_service.acl`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class AdminStore(Protocol):
    def remember_nonces(self, nonces: Sequence[tuple[str, str, int]]) -> list[bool]:
        """Remember each ``(access_key, nonce, signed_at)``; True where it was not seen before."""
        ...

    def purge_nonces(self, before: int) -> int: ...
    def latest_acl(self) -> tuple[int, str, str] | None:
        """The newest published ACL: ``(id, version, content)``."""
        ...

    def acl_published_since(self, at: int) -> bool:
        """Whether a version was published at ``at`` (epoch ms) or later."""
        ...

    def publish_acl(self, version: str, content: str, at: int, by: str) -> int: ...
