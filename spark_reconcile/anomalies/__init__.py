"""The transform: the anomaly kinds, each declared once, and the pure ``DataFrame -> DataFrame``
functions that find them.

* ``kind``       what a kind is (``Kind``: name, severity, description, source, check, planted
                 scenario) and what its check reads (``Evidence``, ``Limits``)
* ``rows``       the row every kind reports (``ANOMALY_COLUMNS``), one kind or several in one pass
* ``view``       the view of the day's transactions (the store kinds' source), ``business_id``
* ``store``      halves, op records, real messages: six kinds on the view
* ``consumers``  acks and dead letters: three kinds (one of them informational)
* ``ledgers``    the banks' books: five kinds
* ``registry``   ``REGISTRY``, every kind in report order; ``KINDS``, ``SEVERITY``, ``find_all``
* ``topics``     the broker's system topics

The names below are the ones the rest of ``spark_reconcile`` and its tests import.
"""

from spark_reconcile.anomalies.consumers import (
    ACK_LAG,
    DEAD_LETTER_RESOLVED,
    DEAD_LETTERED,
    ack_lag,
    dead_letter_resolved,
    dead_lettered,
    dead_letters,
)
from spark_reconcile.anomalies.kind import (
    CRITICAL,
    INFO,
    SEVERITIES,
    WARNING,
    Check,
    Evidence,
    Kind,
    Limits,
)
from spark_reconcile.anomalies.ledgers import (
    AMOUNT_MISMATCH,
    CREDIT_FOR_ROLLED_BACK,
    CREDIT_WITHOUT_DEBIT,
    DEBIT_WITHOUT_CREDIT,
    DOUBLE_CREDIT,
    amount_mismatch,
    credit_for_rolled_back,
    credit_without_debit,
    debit_without_credit,
    double_credit,
    ledger_view,
)
from spark_reconcile.anomalies.registry import KINDS, REGISTRY, SEVERITY, anomaly, find_all
from spark_reconcile.anomalies.rows import ANOMALY_COLUMNS, completed, shaped
from spark_reconcile.anomalies.store import (
    COMMIT_WITHOUT_REAL,
    DISCARDED,
    DUPLICATE_REAL,
    REAL_WITHOUT_COMMIT,
    ROLLBACK_WITH_REAL,
    STUCK,
    commit_without_real,
    discarded_halves,
    duplicate_reals,
    real_without_commit,
    rollback_with_real,
    store_anomalies,
    stuck_halves,
)
from spark_reconcile.anomalies.topics import (
    CHECK_MAX_TOPIC,
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
)
from spark_reconcile.anomalies.view import (
    HALF_ID,
    VIEW_TRANSACTION_COLUMNS,
    business_id,
    halves,
    transaction_view,
    with_half,
)

__all__ = [
    "ACK_LAG",
    "AMOUNT_MISMATCH",
    "ANOMALY_COLUMNS",
    "CHECK_MAX_TOPIC",
    "COMMIT_WITHOUT_REAL",
    "CREDIT_FOR_ROLLED_BACK",
    "CREDIT_WITHOUT_DEBIT",
    "CRITICAL",
    "DEAD_LETTERED",
    "DEAD_LETTER_RESOLVED",
    "DEBIT_WITHOUT_CREDIT",
    "DISCARDED",
    "DLQ_PREFIX",
    "DOUBLE_CREDIT",
    "DUPLICATE_REAL",
    "HALF_ID",
    "HALF_TOPIC",
    "INFO",
    "KINDS",
    "OP_TOPIC",
    "REAL_WITHOUT_COMMIT",
    "REGISTRY",
    "RETRY_PREFIX",
    "ROLLBACK_WITH_REAL",
    "SCHEDULE_TOPIC",
    "SEVERITIES",
    "SEVERITY",
    "STUCK",
    "VIEW_TRANSACTION_COLUMNS",
    "WARNING",
    "Check",
    "Evidence",
    "Kind",
    "Limits",
    "ack_lag",
    "amount_mismatch",
    "anomaly",
    "business_id",
    "commit_without_real",
    "completed",
    "credit_for_rolled_back",
    "credit_without_debit",
    "dead_letter_resolved",
    "dead_lettered",
    "dead_letters",
    "debit_without_credit",
    "discarded_halves",
    "double_credit",
    "duplicate_reals",
    "find_all",
    "halves",
    "ledger_view",
    "real_without_commit",
    "rollback_with_real",
    "shaped",
    "store_anomalies",
    "stuck_halves",
    "transaction_view",
    "with_half",
]
