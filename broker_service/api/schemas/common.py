"""What every part of the REST contract (docs/api.md) shares: times, names, text the stores can keep,
the error envelope, and JSON the broker can echo.

The contract's bodies are pydantic models, one module per concept -- :mod:`.messages` (and topics),
:mod:`.transactions`, :mod:`.checks` (producer groups and check-back), :mod:`.consumers`,
:mod:`.acl` -- and they describe ``/openapi.json``; :mod:`.bodies` reads a body from its bytes.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from broker_service.domain.config import DEFAULT_DELAY_LEVELS, parse_delay_levels

# Epoch milliseconds a time may take: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (RFC 3339's years).
MIN_TIME_MS = -62_135_596_800_000
MAX_TIME_MS = 253_402_300_799_999


def rfc3339(ms: int | None) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC time with milliseconds (``...T12:00:00.123Z``)."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_rfc3339_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=4096)
def _rfc3339_second(seconds: int) -> str:
    # Answers name the same few seconds many times over (a receive of 32 messages, 4 times each).
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds")[:-6]


# Epoch milliseconds written out: "30", and "30.0" as a client serialises JSON Schema's integer 30.0.
_WHOLE = re.compile(r"-?[0-9]+(?:\.0+)?")


def _parse_time(value: Any) -> Any:
    """RFC 3339 strings or epoch milliseconds (numbers or digit strings), to epoch milliseconds."""
    if isinstance(value, bool):
        raise ValueError("a time is an RFC 3339 string or epoch milliseconds")
    if isinstance(value, str):  # a query parameter, or a string in a body
        text = value.strip()
        if not (text.isascii() and _WHOLE.fullmatch(text)):
            return _parse_rfc3339(text)
        value = int(text.partition(".")[0])
    if isinstance(value, float):
        # Epoch milliseconds are whole (the schema says integer): 1.5 is not a time.
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError("epoch milliseconds must be a finite whole number")
        value = int(value)
    if isinstance(value, int) and not MIN_TIME_MS <= value <= MAX_TIME_MS:
        raise ValueError(f"{value} epoch milliseconds is outside the years 0001-9999")
    return value


def _parse_rfc3339(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def json_number(value: Any) -> Any:
    """JSON numbers only: pydantic's lax mode would also take true/false and "2".  A field
    validator (mode "before") on each number field of a body: in the field's type instead, it
    would hide the field's bounds from the OpenAPI schema."""
    if isinstance(value, bool | str):
        raise ValueError("must be a JSON number")
    return value


TimeIn = Annotated[
    int,
    BeforeValidator(_parse_time),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date-time"},
                {"type": "integer", "minimum": MIN_TIME_MS, "maximum": MAX_TIME_MS},
            ],
            "description": "RFC 3339 time or epoch milliseconds",
        }
    ),
]

# Names are checked by the domain (400 INVALID_TOPIC_NAME, SYSTEM_TOPIC, ...); the schema describes them.
NAME_SCHEMA: dict[str, Any] = {
    "pattern": "^[A-Za-z0-9_-]{1,127}$",
    "minLength": 1,
    "maxLength": 127,
}
USER_TOPIC_SCHEMA: dict[str, Any] = {
    **NAME_SCHEMA,
    "not": {"pattern": "^(RMQ_SYS_|SCHEDULE_TOPIC_)"},
    "description": "A topic name; RMQ_SYS_*, SCHEDULE_TOPIC_*, %RETRY%*, %DLQ%* are the broker's own",
}
Name = Annotated[str, Field(min_length=1, max_length=127, pattern=NAME_SCHEMA["pattern"])]


def storable(value: str) -> str:
    """Text the stores can keep: valid Unicode (no lone surrogates) and no NUL (PostgreSQL)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


DEFAULT_LEVEL_COUNT = len(parse_delay_levels(DEFAULT_DELAY_LEVELS))
TEXT_PATTERN = "^[^\\u0000]*$"
# Python's \s (which the domain's checks use) spelled out: JSON Schema's \s is ECMAScript's, which
# lacks \x1c-\x1f and \x85 and has \ufeff.
WHITESPACE = (
    "\\t-\\r\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
TAG_CHAR = f"[^|\\u0000{WHITESPACE}]"
TAG_PATTERN = f"^{TAG_CHAR}{{1,128}}$"
_GAP = f"[{WHITESPACE}]*"
EXPRESSION_PATTERN = (
    f"^{_GAP}(\\*|{TAG_CHAR}{{1,128}}({_GAP}\\|\\|{_GAP}{TAG_CHAR}{{1,128}})*)?{_GAP}$"
)
URL_PATTERN = f"^https?://[^\\u0000{WHITESPACE}]+$"
Storable = Annotated[str, AfterValidator(storable)]
Text = Annotated[Storable, Field(json_schema_extra={"pattern": TEXT_PATTERN})]


class Strict(BaseModel):
    """A request body: unknown fields refused.  Its numbers pass :func:`json_number` and its
    booleans are StrictBool, as pydantic's lax mode would take true for 1 and "2" for 2
    (tests/integration/broker_service/api/test_body_types.py walks every body for it)."""

    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str = Field(examples=["TOPIC_NOT_FOUND"])
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorEnvelope(BaseModel):
    error: ErrorBody


def _unicode_only(value: Any) -> Any:
    """JSON the broker can answer with: valid Unicode strings, nested at most MAX_JSON_DEPTH deep
    (walked without recursion, as JSON can nest deeper than Python's stack)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("strings must be valid Unicode (no lone surrogates)") from None
        elif isinstance(item, dict):
            pending.extend((k, depth) for k in item)
            pending.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            pending.extend((v, depth + 1) for v in item)
    return value


MAX_JSON_DEPTH = 64
AnyJson = Annotated[Any, AfterValidator(_unicode_only)]


class EchoOut(BaseModel):
    echo: Any = None
