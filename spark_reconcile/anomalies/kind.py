"""What an anomaly kind is: a ``Kind`` declares it once, and the registry collects the kinds.

A kind reads one ``Source`` (a frame prepared from the run's ``Evidence``: the view of the
day's transactions, the pending acks, the dead letters, the books of the ledgers) and says with a
``Check`` which of its rows are anomalies, the reason reported and the time of the event.  The
check is built from the run's ``Limits`` (the time it judges at, the thresholds), so ages are
measured the same way by every kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pyspark.sql import Column, DataFrame

from spark_reconcile.config import Thresholds
from spark_reconcile.scenario import Scenario

CRITICAL = "critical"  # money or messages are wrong: exit 2, page someone
WARNING = "warning"  # something is late or missing and may need a hand: exit 1
INFO = "info"  # worth knowing, nothing to do (e.g. a dead letter resent and consumed): exit 0
SEVERITIES = (CRITICAL, WARNING, INFO)  # most urgent first


@dataclasses.dataclass(frozen=True)
class Limits:
    """The time a run judges at (epoch ms) and how old an absence must be to count."""

    as_of: int
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)


UNTIMED = Limits(as_of=0)  # for checks that measure no age


@dataclasses.dataclass(frozen=True)
class Evidence:
    """The frames the checks of one run read (the job persists the shared ones), and its limits.
    ``books`` is None when the run was given no ledger: its kinds are skipped."""

    view: DataFrame
    dead: DataFrame
    subscriptions: DataFrame
    acks: DataFrame
    books: DataFrame | None
    limits: Limits


@dataclasses.dataclass(frozen=True)
class Check:
    """Which rows of a source are anomalies (None: every row), the sentence reported, the time of
    the event, and the consumer group for the kinds about one group."""

    found: Column | None
    reason: Column
    event_at: Column
    consumer_group: Column | None = None


@dataclasses.dataclass(frozen=True)
class Source:
    """A frame kinds are found in, taken from the evidence (None: not in this run).  The kinds of
    a ``one_pass`` source are found in one scan of it, each row exploded into the kinds that
    found it; the others are filtered one kind at a time."""

    name: str
    frame: Callable[[Evidence], DataFrame | None]
    one_pass: bool = False


@dataclasses.dataclass(frozen=True)
class Kind:
    """One anomaly kind: its name (the ``kind`` column and partition), its severity, what it
    means and what an operator does about one (the table of docs/reconcile.md and the report's
    legend), where and how it is found, and the scenario with which the generator plants one."""

    name: str
    severity: str
    description: str
    action: str
    source: Source
    check: Callable[[Limits], Check]
    plant: Scenario
