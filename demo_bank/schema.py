"""A bank's own tables.  Both banks have the same shape; the ledger is what ``halfmq reconcile
--ledger NAME=URL`` reads by default (``transfer_id``, ``account_id``, ``amount``, ``direction``,
``created_at``)."""

from __future__ import annotations

import time

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table

metadata = MetaData()

DEBIT, CREDIT = "DEBIT", "CREDIT"

accounts = Table(
    "accounts",
    metadata,
    Column("account_id", String(64), primary_key=True),
    Column("balance", BigInteger, nullable=False),  # cents
    Column("created_at", BigInteger, nullable=False),  # epoch ms
)

transfers = Table(
    "transfers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # Not unique on purpose: at Smith's bank the inbox, not the schema, keeps a credit single.
    Column("transfer_id", String(64), nullable=False),
    Column("account_id", String(64), nullable=False),
    Column("counterparty", String(64), nullable=False),
    Column("amount", BigInteger, nullable=False),  # cents, positive
    Column("direction", String(8), nullable=False),  # DEBIT (Bob) | CREDIT (Smith)
    Column("created_at", BigInteger, nullable=False),  # epoch ms
    Index("ix_transfers_transfer_id", "transfer_id"),
)


def now_ms() -> int:
    return int(time.time() * 1000)
