"""All the checks of one run, as one DataFrame of anomalies (the transform, still pure)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_reconcile import anomalies as A
from spark_reconcile.config import KeyMapping, Thresholds, Window


def detect(
    *,
    transactions: DataFrame,
    messages: DataFrame,
    dlq: DataFrame,
    scheduled: DataFrame,
    subscriptions: DataFrame,
    acks: DataFrame,
    ledger: DataFrame | None,
    window: Window,
    mapping: KeyMapping,
    thresholds: Thresholds,
    keep: Callable[[DataFrame], DataFrame] = lambda df: df,
) -> DataFrame:
    """The union of every check, with the business id mapped from the keys where a check did not
    set it.  ``keep`` is given the frames several checks read (the view of
    the transactions, the dead letters, the books): the job persists them so each is computed
    once."""
    view = keep(A.transaction_view(transactions, messages, scheduled, window))
    dead = keep(A.dead_letters(view, dlq))
    found = [
        A.store_anomalies(view, as_of=window.as_of, stuck_after=thresholds.stuck_ms),
        A.ack_lag(
            view,
            subscriptions,
            acks,
            dead,
            as_of=window.as_of,
            older_than=thresholds.ack_lag_ms,
        ),
        A.dead_lettered(dead),
    ]
    if ledger is not None:
        books = keep(A.ledger_view(view, ledger, window, mapping))
        found += [
            A.debit_without_credit(books, as_of=window.as_of, older_than=thresholds.credit_lag_ms),
            A.credit_without_debit(books),
            A.amount_mismatch(books),
            A.credit_for_rolled_back(books),
            A.double_credit(books),
        ]
    every = reduce(DataFrame.unionByName, found)
    mapped = A.business_id(F.col("keys"), mapping)
    return every.withColumn("business_id", F.coalesce(F.col("business_id"), mapped))
