"""The retry schedule's one default (docs/api.md, "Delay levels"; docs/consumers.md).

RocketMQ's ``messageDelayLevel``: level ``n`` (from 1) waits the ``n``-th of these durations.  A
message sent with ``delay_level`` waits that level; a nacked message's ``k``-th retry (``k`` from
0) waits level ``RETRY_FIRST_LEVEL + k`` (the last level once past the end).  The broker's
``message_delay_level`` setting replaces the list; this is its default, for the broker's sends
and its consumers' retries alike, and for the client's own reckoning of how long the broker may
still redeliver (``framework.cleanup``)."""

from __future__ import annotations

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
RETRY_FIRST_LEVEL = 3  # RocketMQ: the k-th retry (k = 0, 1, ...) waits delay level 3 + k
