"""The Bob-to-Smith transfer demo: two banks, two databases, one broker, injected faults.

* :mod:`~demo_bank.schema` -- each bank's tables (``accounts``, the ``transfers`` ledger) beside the
  framework's log and inbox; :mod:`~demo_bank.db` runs the banks' Alembic migrations.
* :mod:`~demo_bank.bob` -- Bob's bank: ``POST /transfers`` debits in a local transaction and
  publishes the transfer as a half message (automatic check mode).
* :mod:`~demo_bank.smith` -- Smith's bank: consumes ``transfers`` and credits idempotently (inbox).
* :mod:`~demo_bank.faults` -- the fault hooks the runner switches on (SIGKILL after the local
  commit, dropped commits, a flaky handler).
* :mod:`~demo_bank.runner` -- ``halfmq demo``: real processes, concurrent transfers, faults, the
  proof read back from the banks' databases (:mod:`~demo_bank.proof`).
"""
