"""The nightly reconciliation of halfmq: halves, ops, deliveries and the banks' ledgers.

Extract (``extract``: the broker's store over JDBC or its Parquet export, the ledgers over JDBC),
transform (the ``anomalies`` package: every anomaly kind declared once in its registry, found by
pure ``DataFrame -> DataFrame`` functions) and load (``load`` and ``report``: partitioned Parquet and
a human report) are kept apart; ``job`` wires them.  Only ``cli``, ``export``, ``config``, ``jdbc``
and ``scenario`` import without pyspark.
"""

from spark_reconcile.config import (
    DEFAULT_LEDGER,
    KeyMapping,
    LedgerSource,
    ReconcileConfig,
    Thresholds,
    Window,
)

__all__ = [
    "DEFAULT_LEDGER",
    "KeyMapping",
    "LedgerSource",
    "ReconcileConfig",
    "Thresholds",
    "Window",
]
