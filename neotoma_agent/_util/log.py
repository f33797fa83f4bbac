"""The library's log events: structured when the application asks, silent otherwise.

A library must not print. Unconfigured structlog writes every event to stdout, which corrupts
a program whose stdout is data (a CLI emitting JSON, an MCP server on stdio, a pipe). So:

- if the application configured structlog (``structlog.configure``), events go through it,
  with their bound context (``conversation_id``, ``turn_id``), as structured events;
- otherwise they go to the standard library's ``logging`` under the ``neotoma_agent``
  logger, so nothing below WARNING shows by default and ``logging`` configuration controls
  them, as with httpx. The record's message is ``event key=value ...``; the fields are also
  on the record as ``record.neotoma_event`` and ``record.neotoma_fields``.

The library never configures either; the CLI does, for its own output. Nor does it import
structlog: an application that configured structlog has imported it, so the library uses it
when it is loaded and costs an application that does not use it nothing (a fast import).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Final

__all__ = ["LOGGER_NAME", "EventLogger", "bound_context", "get_logger"]

#: The standard library logger (and structlog logger name) of every library event.
LOGGER_NAME: Final = "neotoma_agent"

_std = logging.getLogger(LOGGER_NAME)

# What bound_context bound while structlog was not loaded (else structlog's contextvars
# hold it, where an application's own events see it too).
_context: ContextVar[Mapping[str, Any]] = ContextVar(
    "neotoma_agent_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def bound_context(**fields: Any) -> Iterator[None]:
    """Bind ``fields`` (``conversation_id``, ``turn_id``) to every event logged within.

    Through ``structlog.contextvars`` when structlog is loaded, as applications that use
    it expect; else in the library's own context variable.
    """
    structlog = sys.modules.get("structlog")
    if structlog is not None:
        with structlog.contextvars.bound_contextvars(**fields):
            yield
        return
    token = _context.set(MappingProxyType({**_context.get(), **fields}))
    try:
        yield
    finally:
        _context.reset(token)


class EventLogger:
    """``debug`` / ``info`` / ``warning`` / ``error``: one event name plus fields."""

    __slots__ = ()

    def debug(self, event: str, **fields: Any) -> None:
        """Log ``event`` at DEBUG."""
        self._emit(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log ``event`` at INFO."""
        self._emit(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log ``event`` at WARNING."""
        self._emit(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log ``event`` at ERROR."""
        self._emit(logging.ERROR, "error", event, fields)

    @staticmethod
    def _emit(level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        structlog = sys.modules.get("structlog")
        own = _context.get()
        if structlog is not None and structlog.is_configured():
            logger = structlog.get_logger(LOGGER_NAME)
            getattr(logger, method)(event, **({**own, **fields} if own else fields))
            return
        if not _std.isEnabledFor(level):
            return
        bound = structlog.contextvars.get_contextvars() if structlog is not None else {}
        merged = {**bound, **own, **fields}
        text = " ".join(
            f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in merged.items()
        )
        _std.log(
            level,
            "%s %s",
            event,
            text,
            extra={"neotoma_event": event, "neotoma_fields": merged},
            stacklevel=3,
        )


_LOGGER: Final = EventLogger()


def get_logger() -> EventLogger:
    """The library's event logger."""
    return _LOGGER
