"""The registry: every anomaly kind, in the order the reports list them.

``REGISTRY`` is the one list the rest of the job iterates over: ``find_all`` (detection, source by
source), ``KINDS`` and ``SEVERITY`` (the load's counts, the report), and the generator (one
planted scenario per kind).  A new kind is one ``Kind`` entry in its family's ``KINDS``
(``store``, ``consumers`` or ``ledgers``); a new family is a module with its own ``KINDS``, added
to ``REGISTRY`` here.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies import consumers, ledgers, store
from spark_reconcile.anomalies.kind import Evidence, Kind, Source
from spark_reconcile.anomalies.rows import one_pass, rows_of, shaped

REGISTRY: tuple[Kind, ...] = (*store.KINDS, *consumers.KINDS, *ledgers.KINDS)


def _names(kinds: Sequence[Kind]) -> tuple[str, ...]:
    names = tuple(kind.name for kind in kinds)
    if len(set(names)) != len(names):
        raise ValueError(f"two kinds share a name: {names}")
    return names


KINDS = _names(REGISTRY)
SEVERITY = {kind.name: kind.severity for kind in REGISTRY}


def by_source(kinds: Sequence[Kind] = REGISTRY) -> dict[Source, list[Kind]]:
    """The kinds grouped by the source they read, sources in the order of their first kind."""
    groups: dict[Source, list[Kind]] = {}
    for kind in kinds:
        groups.setdefault(kind.source, []).append(kind)
    return groups


def find_all(evidence: Evidence) -> list[DataFrame]:
    """The anomalies of every kind whose source the run has: one frame per scan of a one-pass
    source, one per kind for the others."""
    found: list[DataFrame] = []
    for source, kinds in by_source().items():
        frame = source.frame(evidence)
        if frame is None:
            continue
        if source.one_pass:
            found.append(one_pass(frame, kinds, evidence.limits))
        else:
            found += [rows_of(frame, kind, evidence.limits) for kind in kinds]
    return found


def anomaly(
    df: DataFrame,
    kind: str,
    reason: Column,
    *,
    event_at: Column,
    consumer_group: Column | None = None,
) -> DataFrame:
    """Shape ``df`` (which has transaction_id, msg_id, keys, created_at, and business_id for the
    ledger kinds) as rows of ``ANOMALY_COLUMNS`` of the registered ``kind``."""
    return shaped(
        df,
        kind=F.lit(kind),
        severity=F.lit(SEVERITY[kind]),
        reason=reason,
        event_at=event_at,
        consumer_group=consumer_group,
    )
