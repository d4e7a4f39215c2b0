"""Secrets never reach a log line or an error answer.

:func:`redact` masks, as ``***``, what looks like a secret in free text: a URL's password
(``postgresql://user:***@host/db``), query parameters named like a secret (``?token=***``,
``&api_key=***``, ``&X-Signature=***``) and libpq's ``password=***``.  :class:`RedactSecrets` is the
same as a :class:`logging.Filter`; :func:`install_redaction` puts it on every handler of the
process, so every logger (the broker's, uvicorn's, SQLAlchemy's, httpx's) goes through it.
:func:`safe_url` is the exact form for a URL the code holds (SQLAlchemy's own password hiding).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

MASK = "***"

# scheme://user:PASSWORD@  (the user stays: it names the account, it does not open it)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)[^\s/?#]*(?=@)")
# ?token=X  &api_key=X  ;sig=X ...: any parameter whose name holds one of these words
_SECRET_NAMES = r"token|secret|passw(?:or)?d|pwd|key|signature|sig|auth|credential"
_QUERY_SECRET = re.compile(
    rf"(?P<head>[?&;][\w.\-]*(?:{_SECRET_NAMES})[\w.\-]*=)[^&#;\s\"'<>]*", re.IGNORECASE
)
# libpq's key/value form (and PGPASSWORD=..., sslpassword=...): password=X or password='x y'
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\b\w*passw(?:or)?d\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&;,'\"]+)", re.IGNORECASE
)
_PATTERNS = (_URL_PASSWORD, _QUERY_SECRET, _KEYWORD_PASSWORD)
_REPLACEMENT = rf"\g<head>{MASK}"


def redact(text: str) -> str:
    """``text`` with every password and token it holds masked as ``***``."""
    if "=" not in text and "://" not in text:
        return text  # nothing here can hold a secret (the common log line)
    for pattern in _PATTERNS:
        text = pattern.sub(_REPLACEMENT, text)
    return text


def safe_url(url: str) -> str:
    """A database URL fit to print: SQLAlchemy's rendering with the password hidden."""
    try:
        return redact(make_url(url).render_as_string(hide_password=True))
    except (ArgumentError, ValueError):
        return redact(url)


class RedactSecrets(logging.Filter):
    """Masks secrets in a record's message, arguments and traceback; never drops a record."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format: the handler reports it, as logging always does
            return True
        masked = redact(message)
        if masked != message:
            self._mask_message(record, masked)
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True

    @staticmethod
    def _mask_message(record: logging.LogRecord, masked: str) -> None:
        """Mask argument by argument, so formatters that read ``record.args`` (uvicorn's access
        log) keep working; when a secret spans arguments, the message is replaced whole."""
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, Mapping):
            record.args = {key: _masked_arg(value) for key, value in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_masked_arg(value) for value in record.args)
        try:
            if record.getMessage() == masked:
                return
        except Exception:
            pass
        record.msg, record.args = masked, None


def _masked_arg(value: Any) -> Any:
    if isinstance(value, int | float) or value is None:
        return value
    text = str(value)
    masked = redact(text)
    return value if masked == text else masked


def install_redaction() -> RedactSecrets:
    """Put one :class:`RedactSecrets` on every handler configured now (the root's and those of
    loggers with their own, as uvicorn's); call it once logging is configured."""
    secrets = next(
        (f for h in _handlers() for f in h.filters if isinstance(f, RedactSecrets)),
        RedactSecrets(),
    )
    for handler in _handlers():
        if secrets not in handler.filters:
            handler.addFilter(secrets)
    return secrets


def _handlers() -> list[logging.Handler]:
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    return [handler for logger in loggers for handler in logger.handlers]


def quiet_http_client() -> None:
    """httpx logs every request at INFO with its full URL (a callback URL's user-info and
    tokens); the broker's own check-back lines say what matters."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
