"""The registry of anomaly kinds: the names and order the reports use, the documented table, and
the scenarios the generator plants from the kinds' declarations."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

from spark_reconcile import anomalies as A
from spark_reconcile import generate
from spark_reconcile.anomalies import consumers, ledgers, store
from spark_reconcile.scenario import Scenario

DOCS = Path(__file__).resolve().parents[3] / "docs" / "reconcile.md"

# What the reports other tools read list, in this order: changing it changes their output.
REPORTED = {
    "stuck_half": "warning",
    "discarded_half": "warning",
    "commit_without_real": "warning",
    "real_without_commit": "warning",
    "rollback_with_real": "critical",
    "duplicate_real": "critical",
    "ack_lag": "warning",
    "dead_lettered": "warning",
    "dead_letter_resolved": "info",
    "debit_without_credit": "warning",
    "credit_without_debit": "critical",
    "amount_mismatch": "critical",
    "credit_for_rolled_back": "critical",
    "double_credit": "critical",
}


def test_the_registry_is_the_reported_kinds_in_order() -> None:
    assert tuple(REPORTED) == A.KINDS
    assert A.SEVERITY == REPORTED
    assert (*store.KINDS, *consumers.KINDS, *ledgers.KINDS) == A.REGISTRY


def test_each_family_reads_one_source() -> None:
    sources = {kind.name: kind.source.name for kind in A.REGISTRY}
    assert {sources[k.name] for k in store.KINDS} == {"view"}
    assert {sources[k.name] for k in consumers.KINDS} == {"pending acks", "dead letters"}
    assert {sources[k.name] for k in ledgers.KINDS} == {"books"}
    assert [s.name for s in A.registry.by_source()] == [
        "view",
        "pending acks",
        "dead letters",
        "books",
    ]


def documented_kinds() -> list[tuple[str, ...]]:
    """(kind, severity, found when, what to do) of the kinds' table in docs/reconcile.md, in
    its order."""
    text = DOCS.read_text()
    table = text[text.index("| kind | severity | found when | what to do |") :].split("\n\n")[0]
    row = re.compile(r"^\| `(\w+)` \| (?:\*\*)?(\w+)(?:\*\*)? \| (.+?) \| (.+) \|$")
    return [m.groups() for line in table.splitlines() if (m := row.match(line))]


def test_the_documented_table_is_the_registry() -> None:
    documented = [(k.name, k.severity, k.description, k.action) for k in A.REGISTRY]
    assert documented_kinds() == documented


def test_every_kind_says_what_to_do_and_has_a_known_severity() -> None:
    for kind in A.REGISTRY:
        assert kind.action.strip(), kind.name
        assert kind.severity in A.SEVERITIES, kind.name


def test_the_generator_plants_each_kind_as_declared() -> None:
    assert generate.PLANTED == A.KINDS
    assert generate.SCENARIOS[: len(A.KINDS)] == A.KINDS
    for kind in A.REGISTRY:
        assert generate.PLANS[kind.name] is kind.plant
    assert generate.PLANS["ok"] == Scenario()


def test_a_scenario_that_cannot_be_written_is_refused() -> None:
    with pytest.raises(ValueError, match="0, 1 or 2"):
        Scenario(reals=3)
    with pytest.raises(ValueError, match="0, 1 or 2"):
        Scenario(credits=-1)
    with pytest.raises(ValueError, match="same message id slot"):
        Scenario(reals=2, dead_letter=True)
