"""How a log event, an outbox entry or a hook's problem line names an error.

By class, and for an error the store answered with, its status and code: never the error's
message. A server's message is whatever the server sent (a hostile or echoing one puts
anything there: content, a terminal escape, a forged log line), and an exception raised by
application code may quote the text it was handling.
"""

from __future__ import annotations

from .exceptions import APIError

__all__ = ["error_label"]


def error_label(exc: BaseException) -> str:
    """``"ServerError 500 ERR_STORE_FAILED"``, ``"ConnectionLost"``, ``"KeyError"``."""
    if isinstance(exc, APIError):
        return f"{type(exc).__name__} {exc.status}" + (f" {exc.code}" if exc.code else "")
    return type(exc).__name__
