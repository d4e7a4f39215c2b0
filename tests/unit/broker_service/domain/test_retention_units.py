"""The retention rules alone (``domain/retention/plan.py``): where a queue's head may move, for
each kind of reader, without a store."""

from __future__ import annotations

import pytest

from broker_service.domain.config import RetentionPolicy
from broker_service.domain.consumers.model import ConsumeFrom
from broker_service.domain.retention.model import HeadRow, Position, QueueHead, Reader
from broker_service.domain.retention.plan import Cuts, cuts_for, is_prefix_queue, plan_queue

HOUR = 3_600_000
NOW = 1_000 * HOUR
# Ten messages at offsets 100-109, stored an hour apart, the oldest 60 h ago.
QUEUE = QueueHead("t", 0, 100, 110, NOW - 60 * HOUR)
HEAD = [HeadRow(100 + i, NOW - (60 - i) * HOUR) for i in range(10)]
CUTS = Cuts(age=NOW - 48 * HOUR, hard=None, member_seen=NOW - 48 * HOUR)


def reader(**fields: object) -> Reader:
    base: dict[str, object] = {
        "group": "g",
        "broadcasting": False,
        "consume_from": ConsumeFrom.LAST_OFFSET,
        "consume_timestamp": None,
        "own_retry_topic": False,
    }
    return Reader(**{**base, **fields})  # type: ignore[arg-type]


def test_with_no_reader_the_old_prefix_goes_up_to_the_first_young_message() -> None:
    plan = plan_queue(QUEUE, HEAD, [], CUTS, full=False)
    assert plan.end == 110  # offsets 100-109 were stored 60 to 51 h ago: all old


def test_the_head_stops_at_the_age_cut() -> None:
    cuts = Cuts(age=NOW - 55 * HOUR, hard=None, member_seen=0)
    assert plan_queue(QUEUE, HEAD, [], cuts, full=False).end == 105


def test_a_clustering_group_holds_at_its_committed_offset() -> None:
    group = reader(positions={0: [Position("", 104)]})
    plan = plan_queue(QUEUE, HEAD, [group], CUTS, full=False)
    assert plan.end == 104
    assert [(h.group, h.offset) for h in plan.held] == [("g", 104)]
    assert plan.expiries == []


def test_a_group_without_a_position_holds_where_consume_from_would_start_it() -> None:
    first = reader(consume_from=ConsumeFrom.FIRST_OFFSET)
    last = reader(consume_from=ConsumeFrom.LAST_OFFSET)
    since = reader(consume_from=ConsumeFrom.TIMESTAMP, consume_timestamp=NOW - 57 * HOUR)
    retry = reader(own_retry_topic=True)
    assert plan_queue(QUEUE, HEAD, [first], CUTS, full=False).end == 100
    assert plan_queue(QUEUE, HEAD, [last], CUTS, full=False).end == 110
    assert plan_queue(QUEUE, HEAD, [since], CUTS, full=False).end == 103
    assert plan_queue(QUEUE, HEAD, [retry], CUTS, full=False).end == 100


def test_the_hard_limit_passes_a_group_and_expires_what_it_skipped() -> None:
    cuts = Cuts(age=NOW - 48 * HOUR, hard=NOW - 56 * HOUR, member_seen=0)
    group = reader(positions={0: [Position("", 101)]})
    plan = plan_queue(QUEUE, HEAD, [group], cuts, full=False)
    assert plan.end == 104  # up to the first message younger than the hard limit
    assert [(e.group, e.from_offset, e.to_offset, e.count) for e in plan.expiries] == [
        ("g", 101, 104, 3)
    ]


def test_live_broadcasting_members_hold_and_idle_ones_are_expired() -> None:
    members = {"live": NOW - HOUR, "idle": NOW - 50 * HOUR}
    group = reader(
        broadcasting=True,
        members=members,
        positions={0: [Position("live", 106), Position("idle", 102)]},
    )
    plan = plan_queue(QUEUE, HEAD, [group], CUTS, full=False)
    assert plan.end == 106
    assert [(e.client_id, e.count, e.idle_member) for e in plan.expiries] == [("idle", 4, True)]


def test_a_full_scan_says_more_may_follow() -> None:
    assert plan_queue(QUEUE, HEAD, [], CUTS, full=True).more
    assert not plan_queue(
        QUEUE, HEAD, [reader(positions={0: [Position("", 104)]})], CUTS, full=True
    ).more


def test_cuts_follow_the_export_the_dead_letter_retention_and_the_hard_limit() -> None:
    policy = RetentionPolicy(
        retention_ms=48 * HOUR, dead_letter_retention_ms=100 * HOUR, hard_limit_ms=72 * HOUR
    )
    assert cuts_for(policy, "t", NOW, None).age == 0  # never exported: nothing goes
    assert cuts_for(policy, "t", NOW, NOW).age == NOW - 48 * HOUR
    assert cuts_for(policy, "%DLQ%g", NOW, NOW).age == NOW - 100 * HOUR
    assert cuts_for(policy, "t", NOW, NOW).hard == NOW - 72 * HOUR
    assert cuts_for(policy, "t", NOW, NOW - 80 * HOUR).hard == NOW - 80 * HOUR


def test_the_brokers_own_queues_lose_rows_one_by_one() -> None:
    assert is_prefix_queue("transfers")
    assert is_prefix_queue("%RETRY%g")
    assert is_prefix_queue("%DLQ%g")
    assert not is_prefix_queue("RMQ_SYS_TRANS_HALF_TOPIC")
    assert not is_prefix_queue("SCHEDULE_TOPIC_XXXX")


def test_a_pace_leaves_the_writer_to_the_sends_in_proportion() -> None:
    from broker_service.domain.retention.service import Pace

    tenth = Pace(share=0.1, pause=0.002)
    assert abs(tenth.after(0.010) - 0.090) < 1e-9  # 10 ms of work, 90 ms left to the sends
    assert tenth.after(0.0001) == 0.002  # never less than the least pause
    assert Pace(share=1.0, pause=0.0).after(0.5) == 0.0  # all of it: no wait


def test_a_unit_that_waited_through_an_outage_does_not_put_the_round_to_sleep() -> None:
    from broker_service.domain.retention.service import MOST_PAUSE_SECONDS, Pace

    twentieth = Pace(share=0.05, pause=0.002)
    assert twentieth.after(0.1) == pytest.approx(1.9)  # the writer's load: 19 times the unit
    assert twentieth.after(5.0) == MOST_PAUSE_SECONDS  # a failover's wait: not 95 s
    assert Pace(share=0.05, most=2.0).after(5.0) == 2.0
