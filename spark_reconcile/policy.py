"""A team's policy for the open breaks (``--policy FILE``): each kind's allowed age, and the
thresholds that make the run's exit code.  Pure Python: the job hands it counts and ages.

The file is YAML (or JSON), every entry optional::

    kinds:
      stuck_half:     {max_age: 2d, warn_above: 0, critical_above: 20, critical_after: 7d}
      ack_lag:        {max_age: 12h, warn_above: 5}
      double_credit:  {critical_above: 0}

``max_age``: past it an open break is flagged *overdue* (default: 1d for a critical kind, 3d for
a warning one).  ``warn_above`` / ``critical_above``: the kind's open breaks that no operator has
explained or resolved by hand -- the day's and those carried from earlier days -- above which
the run is warnings (exit 1) / critical (exit 2); ``critical_after``: one such break older than
this makes it critical too.  A kind without an entry, and every kind when no file is given, keeps
the fixed rule: the day's count of its anomalies raises the exit code to its severity.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

# The severities' names, as ``anomalies.kind`` spells them (this module imports without pyspark:
# the command line loads the file before it starts Spark).
CRITICAL, WARNING, INFO = "critical", "warning", "info"
DAY_MS = 86_400_000

CLEAN, WARNINGS, CRITICALS = 0, 1, 2
LEVEL = {INFO: CLEAN, WARNING: WARNINGS, CRITICAL: CRITICALS}
DEFAULT_MAX_AGE_MS = {CRITICAL: DAY_MS, WARNING: 3 * DAY_MS}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS}


class PolicyError(ValueError):
    """The policy file cannot be used: the message says where and why."""


def duration_ms(text: str | int) -> int:
    """``90s``, ``15m``, ``1h``, ``2d`` (a bare number is seconds) -> milliseconds."""
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 1h or 2d")
    return int(float(match[1]) * _UNIT_MS[match[2] or "s"])


class _KindEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_age: str | int | None = None
    warn_above: int | None = None
    critical_above: int | None = None
    critical_after: str | int | None = None

    @field_validator("max_age", "critical_after")
    @classmethod
    def _is_duration(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            duration_ms(value)
        return value

    @field_validator("warn_above", "critical_above")
    @classmethod
    def _not_negative(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("a threshold is a count, 0 or more")
        return value


class _PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kinds: dict[str, _KindEntry] = {}


@dataclasses.dataclass(frozen=True)
class KindRule:
    """One kind's rule (times in ms; None: not set)."""

    max_age_ms: int | None
    warn_above: int | None = None
    critical_above: int | None = None
    critical_after_ms: int | None = None

    @property
    def has_thresholds(self) -> bool:
        return (self.warn_above, self.critical_above, self.critical_after_ms) != (None,) * 3


@dataclasses.dataclass(frozen=True)
class Policy:
    """Each kind's rule; ``from_file`` tells whether a team's file gave it (else the fixed
    rule decides the exit code)."""

    rules: Mapping[str, KindRule]
    from_file: str | None = None

    def max_age_ms(self, kind: str) -> int | None:
        rule = self.rules.get(kind)
        return None if rule is None else rule.max_age_ms

    def level(self, kind: str, severity: str, today: int, unhandled: int, oldest_ms: int) -> int:
        """The exit code this kind asks for: ``today`` its anomalies of the day, ``unhandled``
        its open breaks no operator explained or resolved, ``oldest_ms`` the age of the oldest
        of those (0: none)."""
        rule = self.rules.get(kind)
        if rule is None or not rule.has_thresholds:
            return LEVEL[severity] if today else CLEAN
        if rule.critical_above is not None and unhandled > rule.critical_above:
            return CRITICALS
        if rule.critical_after_ms is not None and unhandled and oldest_ms > rule.critical_after_ms:
            return CRITICALS
        if rule.warn_above is not None and unhandled > rule.warn_above:
            return WARNINGS
        return CLEAN

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.from_file,
            "kinds": {k: dataclasses.asdict(r) for k, r in self.rules.items()},
        }


def default_policy(severities: Mapping[str, str]) -> Policy:
    """The allowed ages by severity, no thresholds: the fixed rule decides."""
    return Policy({k: KindRule(DEFAULT_MAX_AGE_MS.get(s)) for k, s in severities.items()})


def load_policy(path: Path, severities: Mapping[str, str]) -> Policy:
    """The team's file over the defaults; an unknown kind, key or duration is a PolicyError."""
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        parsed = _PolicyFile.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read the policy: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"{path}: {where}: {first['msg']}") from exc
    unknown = _unknown(parsed.kinds, severities)
    if unknown:
        raise PolicyError(f"{path}: no such anomaly kind: {', '.join(unknown)}")
    rules = dict(default_policy(severities).rules)
    for kind, entry in parsed.kinds.items():
        rules[kind] = KindRule(
            max_age_ms=(
                duration_ms(entry.max_age)
                if entry.max_age is not None
                else DEFAULT_MAX_AGE_MS.get(severities[kind])
            ),
            warn_above=entry.warn_above,
            critical_above=entry.critical_above,
            critical_after_ms=(
                duration_ms(entry.critical_after) if entry.critical_after is not None else None
            ),
        )
    return Policy(rules, from_file=str(path))


def _unknown(kinds: Iterable[str], severities: Mapping[str, str]) -> list[str]:
    return sorted(k for k in kinds if k not in severities)
