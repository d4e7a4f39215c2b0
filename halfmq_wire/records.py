"""The answers both sides exchange, written once (docs/api.md): the broker writes them with
``to_json()``, the client reads them with ``from_json()``.  Plain frozen dataclasses: the broker's
OpenAPI describes them as they are (FastAPI reads a dataclass's fields), and the client needs no
validation library to read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class HalfReceipt:
    """A half message stored (``POST /v1/transactions``, 201; an item of ``POST
    /v1/transactions:batch``): PREPARED, invisible to consumers until committed.  ``duplicate``:
    a half of the same ``msg_id`` and content was stored before, and this is its receipt."""

    transaction_id: str
    msg_id: str
    duplicate: bool = False
    state: Literal["PREPARED"] = "PREPARED"

    def to_json(self) -> dict[str, Any]:
        return {
            "transaction_id": self.transaction_id,
            "msg_id": self.msg_id,
            "state": self.state,
            "duplicate": self.duplicate,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HalfReceipt:
        return cls(str(data["transaction_id"]), str(data["msg_id"]), bool(data.get("duplicate")))


@dataclass(frozen=True, slots=True)
class AckResult:
    """What an ack did (``POST /v1/consumer-groups/{group}/ack``): ``acked`` messages consumed,
    and the ``stale`` handles that acked nothing (their invisibility ran out: the message comes
    again)."""

    acked: int
    stale: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"acked": self.acked, "stale": list(self.stale)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AckResult:
        return cls(int(data["acked"]), tuple(data.get("stale") or ()))
