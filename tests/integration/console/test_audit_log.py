"""The audit log on both stores: entries come back newest first, by subject; oversized fields are
cut to the columns; a refused path that names no action is ``unknown`` (never a metric label
made of a URL)."""

from __future__ import annotations

from broker_service.console.auditing import action_of
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.audit.service import MAX_SUBJECT, AuditService
from tests.support import open_store


async def test_entries_newest_first_by_subject_and_cut_to_size(store_url: str) -> None:
    async with open_store(store_url) as store:
        audit = AuditService(store, clock=iter(range(1000, 2000)).__next__)
        await audit.record("operator-key", "commit", "transaction:t1", AuditResult.OK,
                           {"state": "COMMITTED"})  # fmt: skip
        await audit.record("anonymous", "check_now", "transaction:t2", AuditResult.FAILED,
                           {"code": "TRANSACTION_NOT_FOUND"})  # fmt: skip
        long = await audit.record("k" * 300, "x" * 100, "s" * 2000, AuditResult.REFUSED)
        assert (len(long.access_key), len(long.action), len(long.subject)) == (128, 64, MAX_SUBJECT)
        every = await audit.entries()
        assert [e.at for e in every] == [1002, 1001, 1000]
        (only,) = await audit.entries("transaction:t1")
        assert (only.access_key, only.action, only.result) == ("operator-key", "commit",
                                                                AuditResult.OK)  # fmt: skip
        assert only.detail == {"state": "COMMITTED"}
        assert only.id is not None


def test_refusals_name_known_actions_only() -> None:
    assert action_of("/console/transactions/abc/commit") == ("commit", "transaction:abc")
    assert action_of("/console/consumer-groups/g/dlq/resend") == (
        "resend_dead_letter",
        "consumer-group:g",
    )
    assert action_of("/console/topics/t/delete") == ("delete_topic", "topics")
    assert action_of("/console/anything-at-all") == ("unknown", "console")
