"""How a scheduler's failed rounds are paced and told, the same for every scheduler.

A store outage makes every round fail the same way.  :class:`FailedRounds` keeps the log to a few
lines whatever the round's pace: a WARNING at the first failure, then at most one every
``remind_seconds`` with the count since the previous one, and one INFO line when a round works
again, with how many failed and for how long.  An unexpected error (not a
:class:`~broker_service.domain.errors.DomainError`: a bug, not an outage) carries its traceback
the first time it is logged.  It also paces the retries: the pause after a failed round doubles
from ``base`` up to ``cap``, so a scheduler that runs several rounds a second does not hammer a
store that is down, and comes back within ``cap`` of its recovery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker_service.domain.errors import DomainError
from broker_service.logs import redact

REMIND_SECONDS = 60.0


class FailedRounds:
    """The failures of one scheduler's rounds: ``what`` names the round in its lines ("releasing
    delayed messages")."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        base: float,
        cap: float,
        remind_seconds: float = REMIND_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.what = what
        self.base = base
        self.cap = max(cap, base)
        self.remind = remind_seconds
        self.clock = clock
        self.failures = 0  # consecutive failed rounds, 0 while rounds work
        self._since = 0.0  # when the first of them failed
        self._unsaid = 0  # failures since the last line
        self._said_at = 0.0

    @classmethod
    def every(cls, log: logging.Logger, what: str, seconds: float) -> FailedRounds:
        """The failures of a scheduler whose rounds keep their pace: a failed round is retried a
        round's ``seconds`` later, no sooner."""
        return cls(log, what, base=seconds, cap=seconds)

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, error: BaseException) -> float:
        """A round failed with ``error``: tell it if it is time to, and return the pause before
        the next round (``base``, doubled at each further failure, at most ``cap``)."""
        now = self.clock()
        self.failures += 1
        self._unsaid += 1
        expected = isinstance(error, DomainError)
        if isinstance(error, DomainError):
            reason = redact(error.message)
        else:
            reason = redact(f"{type(error).__name__}: {error}")
        if self.failures == 1:
            self._since, self._said_at, self._unsaid = now, now, 0
            self.log.warning(
                "%s failed: %s", self.what, reason, exc_info=None if expected else error
            )
        elif now - self._said_at >= self.remind:
            self.log.warning(
                "%s still failing: %d more failed rounds in the last %.0f s, %d since %.0f s "
                "ago: %s",
                self.what,
                self._unsaid,
                now - self._said_at,
                self.failures,
                now - self._since,
                reason,
            )
            self._said_at, self._unsaid = now, 0
        return self.pause()

    def pause(self) -> float:
        """The pause after the failures so far: ``base`` after none or one, doubling, at most
        ``cap``."""
        if self.failures <= 1:
            return self.base
        return min(self.cap, self.base * 2.0 ** min(self.failures - 1, 64))

    def succeeded(self) -> None:
        """A round worked: one line if rounds had been failing, and back to the normal pace."""
        if not self.failures:
            return
        self.log.info(
            "%s works again after %d failed rounds over %.0f s",
            self.what,
            self.failures,
            self.clock() - self._since,
        )
        self.failures = self._unsaid = 0
