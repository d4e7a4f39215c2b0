"""The small parts of ``MemoryTx``: the ACL's nonces and published versions, the console's audit
log, the brokers sharing the store, the gRPC clients' profiles, and the reconciliation's break
statuses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker_service.domain.audit.model import AuditEntry
from broker_service.domain.brokers.model import BrokerPresence
from broker_service.domain.clients.model import ClientProfile
from broker_service.domain.ports.breaks import BreakStatus
from broker_service.memstore.state import AclVersion, Part


class AclPart(Part):
    def remember_nonces(self, nonces: Sequence[tuple[str, str, int]]) -> list[bool]:
        """Remember each ``(access_key, nonce, signed_at)``; True where it was not seen before
        (of two equal ones in ``nonces``, the first)."""
        fresh = []
        for access_key, nonce, signed_at in nonces:
            key = (signed_at, access_key, nonce)
            new = key not in self.s.nonces
            if new:
                self.put(self.s.nonces, key, None)
            fresh.append(new)
        return fresh

    def purge_nonces(self, before: int) -> int:
        """Forget requests signed before ``before`` (ms): they can no longer be accepted."""
        old = [key for key in self.s.nonces if key[0] < before]
        for key in old:
            self.drop(self.s.nonces, key)
        return len(old)

    def latest_acl(self) -> tuple[int, str, str] | None:
        if not self.s.acl_versions:
            return None
        newest = max(self.s.acl_versions)
        version = self.s.acl_versions[newest]
        return newest, version.version, version.content

    def acl_published_since(self, at: int) -> bool:
        return any(v.published_at >= at for v in self.s.acl_versions.values())

    def publish_acl(self, version: str, content: str, at: int, by: str) -> int:
        version_id = self.s.next_id("acl_versions")
        self.put(self.s.acl_versions, version_id, AclVersion(version, content, at, by))
        return version_id


class AuditPart(Part):
    def append_audit(self, entry: AuditEntry) -> int:
        entry_id = self.s.next_id("audit_log")
        self.put(self.s.audit, entry_id, replace(entry, detail=dict(entry.detail), id=entry_id))
        return entry_id

    def audit_entries(self, subject: str | None, limit: int) -> list[AuditEntry]:
        newest = sorted(self.s.audit.items(), reverse=True)
        found = [e for _, e in newest if subject is None or e.subject == subject][:limit]
        return [replace(e, detail=dict(e.detail)) for e in found]


class BrokerPart(Part):
    def see_broker(self, presence: BrokerPresence) -> None:
        self.put(self.s.brokers, presence.broker_id, presence)

    def forget_brokers(self, seen_before: int) -> int:
        old = [b for b, p in self.s.brokers.items() if p.last_seen_at < seen_before]
        for broker_id in old:
            self.drop(self.s.brokers, broker_id)
        return len(old)

    def list_brokers(self) -> list[BrokerPresence]:
        return [p for _, p in sorted(self.s.brokers.items())]


class ClientPart(Part):
    def save_client(self, profile: ClientProfile) -> None:
        self.put(self.s.clients, profile.client_id, profile)

    def get_clients(self, client_ids: Sequence[str]) -> dict[str, ClientProfile]:
        return {c: self.s.clients[c] for c in client_ids if c in self.s.clients}

    def forget_clients(self, seen_before: int) -> int:
        old = [c for c, p in self.s.clients.items() if p.updated_at < seen_before]
        for client_id in old:
            self.drop(self.s.clients, client_id)
        return len(old)


class BreakStatusPart(Part):
    def set_break_status(self, status: BreakStatus) -> None:
        self.put(self.s.breaks, status.break_id, status)

    def break_statuses(self, break_ids: Sequence[str]) -> dict[str, BreakStatus]:
        return {b: self.s.breaks[b] for b in break_ids if b in self.s.breaks}
