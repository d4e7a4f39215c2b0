"""A store failure as clients see it: a code and a reference, never the driver's words.

The driver's message names the database's server, its roles, tables and columns
(``connection to server at "10.0.0.5", port 5432 failed: FATAL: role "halfmq" is not permitted to
log in``, ``permission denied for table messages``): an operator's to read, not a client's.  A
client is answered 503 ``STORE_UNAVAILABLE`` with a *reference*; the broker's log holds the
driver's message under the same reference, so a client can quote it and the operator find it.

A reference names the failure, not the request: the same message gets the same reference (a keyed
hash, its key drawn when the broker starts, so a reference tells nothing of the message to anyone
without the log).  So an outage answering thousands of requests logs its message once, and again
at most once a minute while it lasts (:data:`REMIND_SECONDS`), however many clients quote it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from broker_service.domain.errors import NotReady

log = logging.getLogger("halfmq.store")

REMIND_SECONDS = 60.0
_REMEMBERED = 1024  # references whose last log line is remembered (then forgotten all at once)


def driver_message(error: BaseException) -> str:
    """The driver's own words for a store error, on one line: libpq's message for a multi-host
    URL has a line per host it tried, and SQLAlchemy's text adds the statement and a link."""
    cause = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    lines = (line.strip() for line in str(cause).splitlines())
    return " ".join(line for line in lines if line) or type(error).__name__


class FailureLog:
    """Says each store failure's message in the log under its reference (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = secrets.token_bytes(16)
        self._clock = clock
        self._said: dict[str, float] = {}
        self._lock = threading.Lock()

    def reference(self, message: str) -> str:
        digest = hmac.new(self._key, message.encode("utf-8", "replace"), hashlib.sha256)
        return digest.hexdigest()[:12]

    def said(self, message: str) -> str:
        """``message`` logged under its reference (unless it was less than a minute ago); the
        reference."""
        reference = self.reference(message)
        if self._due(reference):
            log.error("store failure, reference %s: %s", reference, message)
        return reference

    def noted(self, reference: str) -> None:
        """A caller logged the message of ``reference`` itself (with the reference): not again
        for a minute."""
        self._due(reference)

    def _due(self, reference: str) -> bool:
        """Whether ``reference`` is to be logged now (then it counts as logged)."""
        now = self._clock()
        with self._lock:
            last = self._said.get(reference)
            if last is not None and now - last < REMIND_SECONDS:
                return False
            if len(self._said) >= _REMEMBERED:
                self._said.clear()
            self._said[reference] = now
            return True


# One per process: the references a client quotes are this broker's log's.
failures = FailureLog()


def store_unavailable(error: BaseException) -> NotReady:
    """503 ``STORE_UNAVAILABLE`` (with ``Retry-After``) for a store that failed or cannot be
    reached -- what clients are told while a PostgreSQL primary is down or being replaced, or
    the broker's role may not log in or read a table.  The driver's message goes to the log."""
    return unavailable(driver_message(error))


def unavailable(message: str, hint: str = "") -> NotReady:
    """:func:`store_unavailable` for a failure already put in words (``message``: the log's).
    ``hint``: what an operator can do about it, in words of the broker's own that name no
    server, role or table (a client passes it on)."""
    reference = failures.said(message)
    return NotReady(
        f"the store failed{f' ({hint})' if hint else ''}; the broker's log says why under "
        f"reference {reference}",
        code="STORE_UNAVAILABLE",
        reference=reference,
    )


def with_reference(message: str) -> str:
    """``message`` and its reference, for a caller that logs it itself (see :meth:`FailureLog.noted`)."""
    return f"{message} [reference {failures.reference(message)}]"


def unreachable_reason(error: BaseException) -> str:
    """Why the store is not ready, as a readiness probe (public) answers it: the reference."""
    return f"store unreachable; the broker's log says why under reference {failures.said(driver_message(error))}"
