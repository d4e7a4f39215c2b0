"""One run's figures (:class:`Summary`): what the report pages are made of, and its verdict."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from spark_reconcile.anomalies import KINDS, SEVERITIES, SEVERITY
from spark_reconcile.policy import CLEAN, CRITICALS, WARNINGS, Policy, default_policy

# The breaks' states and statuses, as ``breaks`` names them (this module runs no Spark).
RESOLVED = "resolved"
UNHANDLED = ("open", "acknowledged")
BUCKETS = ("<1d", "1-3d", "3-7d", ">7d")
_FIELDS = (
    "break_id",
    "kind",
    "severity",
    "transaction_id",
    "msg_id",
    "business_id",
    "consumer_group",
    "created_at",
    "event_at",
    "reason",
    "first_seen",
    "state",
    "previous_kind",
    "amount",
    "status",
    "note",
    "actor",
    "updated_at",
    "age_ms",
    "age_bucket",
    "overdue",
)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


_KIND_RANK = {kind: i for i, kind in enumerate(KINDS)}
_STATE_RANK = {"changed_kind": 0, "still_open": 1, "new": 2, "resolved": 3}


def _row_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """The report's order of the breaks, the same on every run and every cluster: by kind (the
    registry's order), the carried ones first, oldest first, then by id."""
    return (
        _KIND_RANK.get(str(row["kind"]), len(_KIND_RANK)),
        _STATE_RANK.get(str(row["state"]), len(_STATE_RANK)),
        str(row["first_seen"] or ""),
        row["created_at"] or 0,
        str(row["break_id"]),
    )


@dataclasses.dataclass(frozen=True)
class KindBreaks:
    """One kind's breaks after the run."""

    open: int = 0  # found today: new, still open or changed into this kind
    new: int = 0
    carried: int = 0  # open since an earlier day
    resolved: int = 0  # closed by the job: the data no longer shows them
    overdue: int = 0
    unhandled: int = 0  # open and neither explained nor resolved by hand
    oldest_unhandled_ms: int = 0
    amount: int = 0  # at stake in the open ones (the ledgers' unit)


@dataclasses.dataclass(frozen=True)
class BreakFigures:
    """The run's breaks: counted groups and the listed rows (``breaks`` and ``load``)."""

    groups: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    statuses_from: str = ""

    @classmethod
    def of(
        cls, groups: list[dict[str, Any]], rows: list[dict[str, Any]], *, statuses_from: str = ""
    ) -> BreakFigures:
        plain = sorted(({k: _plain(r.get(k)) for k in _FIELDS} for r in rows), key=_row_order)
        counted = sorted(({k: _plain(v) for k, v in g.items()} for g in groups), key=str)
        return cls(counted, plain, statuses_from)

    def by_kind(self) -> dict[str, KindBreaks]:
        found: dict[str, dict[str, int]] = {}
        for g in self.groups:
            k = found.setdefault(str(g["kind"]), dict.fromkeys(KindBreaks.__annotations__, 0))
            n = int(g["count"])
            if g["state"] == RESOLVED:
                k["resolved"] += n
                continue
            k["open"] += n
            k["new" if g["state"] == "new" else "carried"] += n
            k["overdue"] += n if g["overdue"] else 0
            k["amount"] += int(g["amount"] or 0)
            if g["status"] in UNHANDLED:
                k["unhandled"] += n
                k["oldest_unhandled_ms"] = max(k["oldest_unhandled_ms"], int(g["oldest_ms"] or 0))
        return {kind: KindBreaks(**found[kind]) for kind in KINDS if kind in found}

    def totals(self, key: str) -> dict[str, int]:
        """The open breaks counted by ``key`` (``age_bucket``, ``status``, ``state``)."""
        counted: dict[str, int] = {}
        for g in self.groups:
            if g["state"] != RESOLVED:
                counted[str(g[key])] = counted.get(str(g[key]), 0) + int(g["count"])
        return dict(sorted(counted.items()))

    def to_json(self) -> dict[str, Any]:
        kinds = self.by_kind()
        return {
            "statuses_from": self.statuses_from,
            "open": sum(k.open for k in kinds.values()),
            "new": sum(k.new for k in kinds.values()),
            "carried": sum(k.carried for k in kinds.values()),
            "resolved": sum(k.resolved for k in kinds.values()),
            "overdue": sum(k.overdue for k in kinds.values()),
            "age_buckets": {b: self.totals("age_bucket").get(b, 0) for b in BUCKETS},
            "statuses": self.totals("status"),
            "per_kind": {kind: dataclasses.asdict(k) for kind, k in kinds.items()},
            "rows": self.rows,
        }


@dataclasses.dataclass(frozen=True)
class Stakes:
    """The day's match rate and breakdowns, and each source's cut-off (``stakes``)."""

    rates: list[dict[str, Any]]  # per (topic, producer group): transactions, broken, last_at
    consumer_groups: list[dict[str, Any]]  # per (group, kind): count
    cutoffs: list[dict[str, Any]]  # per source: last_id, last_at, rows

    @property
    def transactions(self) -> int:
        return sum(int(r["transactions"]) for r in self.rates)

    @property
    def broken(self) -> int:
        return sum(int(r["broken"]) for r in self.rates)

    @property
    def match_rate(self) -> float | None:
        """Transactions with no anomaly (but info) over the day's transactions; None: none."""
        return None if not self.transactions else 1 - self.broken / self.transactions

    def by(self, key: str) -> list[dict[str, Any]]:
        """``rates`` summed by ``topic`` or ``producer_group``, each with its match rate."""
        sums: dict[str, list[int]] = {}
        for r in self.rates:
            n = sums.setdefault(str(r[key]), [0, 0])
            n[0] += int(r["transactions"])
            n[1] += int(r["broken"])
        return [
            {key: k, "transactions": t, "broken": b, "match_rate": 1 - b / t if t else None}
            for k, (t, b) in sorted(sums.items())
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "transactions": self.transactions,
            "broken": self.broken,
            "match_rate": self.match_rate,
            "by_topic": self.by("topic"),
            "by_producer_group": self.by("producer_group"),
            "by_consumer_group": self.consumer_groups,
            "cutoffs": self.cutoffs,
        }


@dataclasses.dataclass(frozen=True)
class Summary:
    """One run's figures.  ``rows`` holds the anomalies the report lists per kind (every one up
    to the job's cap; ``counts`` has the full numbers); ``console_url`` (None: none configured)
    is where the report links each transaction."""

    day: dt.date
    source: str
    window: dict[str, int]
    counts: dict[str, int]
    rows: dict[str, list[dict[str, Any]]]
    trend: list[tuple[dt.date, dict[str, int]]]
    ledgers: tuple[str, ...]
    console_url: str | None = None
    breaks: BreakFigures | None = None
    policy: Policy | None = None
    stakes: Stakes | None = None

    def total(self, severity: str) -> int:
        return sum(n for kind, n in self.counts.items() if SEVERITY[kind] == severity)

    def levels(self) -> dict[str, int]:
        """The exit code each kind asks for, by the policy (the fixed rule without one: the
        day's count raises it to the kind's severity)."""
        policy = self.policy or default_policy(SEVERITY)
        kinds = self.breaks.by_kind() if self.breaks is not None else {}
        return {
            kind: policy.level(
                kind,
                SEVERITY[kind],
                self.counts.get(kind, 0),
                kinds[kind].unhandled if kind in kinds else 0,
                kinds[kind].oldest_unhandled_ms if kind in kinds else 0,
            )
            for kind in KINDS
        }

    @property
    def exit_code(self) -> int:
        """Info never raises it: a resolved dead letter leaves a day clean."""
        return max([CLEAN, *self.levels().values()])

    @property
    def status(self) -> str:
        return {CLEAN: "clean", WARNINGS: "warnings", CRITICALS: "critical"}[self.exit_code]

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.day.isoformat(),
            "status": self.status,
            "exit_code": self.exit_code,
            "source": self.source,
            "ledgers": list(self.ledgers),
            "window": self.window,
            **{severity: self.total(severity) for severity in SEVERITIES},
            "counts": {k: {"severity": SEVERITY[k], "count": self.counts[k]} for k in KINDS},
            "trend": [{"date": d.isoformat(), "counts": c} for d, c in self.trend],
            "policy": (self.policy or default_policy(SEVERITY)).to_json(),
            "levels": {k: v for k, v in self.levels().items() if v},
            "breaks": self.breaks.to_json() if self.breaks is not None else None,
            "stakes": self.stakes.to_json() if self.stakes is not None else None,
        }
