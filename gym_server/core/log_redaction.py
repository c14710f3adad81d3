"""No log line holds a key: every log record is redacted when it is made, whichever library logs it.

At debug level the WebSocket layer (uvicorn's websockets implementation) logs each handshake header,
`authorization: Bearer gym_<id>_<secret>` included; httpx, httpcore and SQLAlchemy's echo log requests
and parameters; an exception message may quote a header. Masked, in the message, the formatted
traceback and the stack: the secret of a gym key (`gym_<id>_***`: the public id stays, to say which
key it was), the value of an `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`,
`X-API-Key`, `api_key` or `X-CSRF-Token` field in any spelling a library prints (`name: value`,
`'name': 'value'`, `(b'name', b'value')`), any `Bearer` token, and a password in a URL.

Why a record factory and not only filters: a logger's filter sees only records logged to that logger,
not those its children pass up (`uvicorn.error` vs `uvicorn`), and `logging.config.dictConfig`, which
uvicorn runs at start, replaces handlers and their filters. The factory runs for every record of every
logger once its level lets it through, so the cost falls on emitted lines only. `RedactingFilter` is
also installed on the root logger and on the libraries' loggers (for a program that swaps the record
factory afterwards), and can be named in a `dictConfig`.
`install()` runs when `gym_server` is imported, so the server, the CLI and every client are covered.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["RedactingFilter", "install", "redact"]

_MASK = "***"
_GYM_KEY = re.compile(r"\b(gym_[0-9a-fA-F]{12}_)[A-Za-z0-9_-]+")
_FIELD = re.compile(
    r"(?i)(\b(?:proxy-)?authorization|\b(?:set-)?cookie|\bx-api-key|\bapi[-_]key|\bx-csrf-token)"
    r"(['\"]\s*,\s*(?-i:b)?['\"]|['\"]?\s*[:=]\s*(?:(?-i:b)?['\"])?)([^'\"\r\n]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")
# Loggers that log headers, requests or parameters: they get the filter besides the record factory.
LIBRARY_LOGGERS = (
    "gym_server",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "websockets",
    "websockets.server",
    "websockets.client",
    "httpx",
    "httpcore",
    "sqlalchemy",
    "sqlalchemy.engine",
    "sqlalchemy.engine.Engine",
)
_DONE = "_gym_redacted"


def redact(text: str) -> str:
    """`text` with keys, credential header values, bearer tokens and URL passwords masked."""
    if "gym_" in text:
        text = _GYM_KEY.sub(rf"\1{_MASK}", text)
    text = _FIELD.sub(rf"\1\2{_MASK}", text)
    text = _BEARER.sub(rf"\1{_MASK}", text)
    return _URL_PASSWORD.sub(rf"\1{_MASK}@", text) if "://" in text else text


def _redact_record(record: logging.LogRecord) -> None:
    if getattr(record, _DONE, False):
        return
    setattr(record, _DONE, True)
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when the record is emitted
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


class RedactingFilter(logging.Filter):
    """Redacts a record in place (see the module docstring); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


_FILTER = RedactingFilter()
_installed = False


def install() -> None:
    """Redact every log record from now on (idempotent); see the module docstring."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        _redact_record(record)
        return record

    logging.setLogRecordFactory(redacting_factory)
    for name in ("", *LIBRARY_LOGGERS):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
