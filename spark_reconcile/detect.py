"""All the checks of one run, as one DataFrame of anomalies (the transform, still pure)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_reconcile import anomalies as A
from spark_reconcile.config import KeyMapping, Thresholds, Window
from spark_reconcile.extract import StoreFrames


def detect(
    store: StoreFrames,
    ledger: DataFrame | None,
    *,
    window: Window,
    mapping: KeyMapping,
    thresholds: Thresholds,
    keep: Callable[[DataFrame], DataFrame] = lambda df: df,
) -> DataFrame:
    """The union of every registered kind's anomalies, completed with their halves' keys (and
    tags, for the kinds that test them), with the business id mapped from the keys where a kind
    did not set it.  ``keep`` is given the frames read more than once (the view of the
    transactions, the dead letters, the books, the rows found before completing them): the job
    persists them so each is computed once."""
    messages, acks = store.messages, store.acks
    view = keep(A.transaction_view(store.transactions, messages, store.scheduled, window))
    dead = keep(A.dead_letters(view, store.dlq, acks))
    books = None
    if ledger is not None:
        books = keep(A.ledger_view(A.with_half(view, messages), ledger, window, mapping))
    limits = A.Limits(window.as_of, thresholds)
    evidence = A.Evidence(view, dead, store.subscriptions, acks, books, limits)
    found = keep(reduce(DataFrame.unionByName, A.find_all(evidence)))
    every = A.completed(found, messages)
    mapped = A.business_id(F.col("keys"), mapping)
    return every.withColumn("business_id", F.coalesce(F.col("business_id"), mapped))
