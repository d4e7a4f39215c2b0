"""Schemas and small builders shared by the reconciliation tests (imported by name: the
tests directory is on sys.path in pytest's default import mode)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"

MESSAGE_DDL = (
    "id long, topic string, msg_id string, tags string, keys string, properties string, "
    "transaction_id string, origin_id long, stored_at long"
)
TRANSACTION_DDL = (
    "transaction_id string, msg_id string, producer_group string, topic string, state string, "
    "check_times int, created_at long, resolved_at long, discarded_at long"
)
SUBSCRIPTION_DDL = "consumer_group string, topic string, expression string, created_at long"
ACK_DDL = "consumer_group string, msg_id string"
LEDGER_DDL = (
    "bank string, business_id string, account_id string, amount long, direction string, "
    "created_at long"
)


def unavailable(reason: str) -> None:
    """Skip on a developer's machine, fail in CI: CI must run every test."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


def keys(*values: str) -> str:
    return json.dumps(list(values))


def op_properties(decision: str) -> str:
    return json.dumps({"DECISION": decision, "RESOLVED_BY": "producer"})


def migrate(url: str) -> sa.Engine:
    """A store at ``url`` brought to the head of the broker's migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")
    return sa.create_engine(url)
