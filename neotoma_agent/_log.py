"""The library's log events: structured when the application asks, silent otherwise.

A library must not print. Unconfigured structlog writes every event to stdout, which corrupts
a program whose stdout is data (a CLI emitting JSON, an MCP server on stdio, a pipe). So:

- if the application configured structlog (``structlog.configure``), events go through it,
  with their bound context (``conversation_id``, ``turn_id``), as structured events;
- otherwise they go to the standard library's ``logging`` under the ``neotoma_agent``
  logger, so nothing below WARNING shows by default and ``logging`` configuration controls
  them, as with httpx. The record's message is ``event key=value ...``; the fields are also
  on the record as ``record.neotoma_event`` and ``record.neotoma_fields``.

The library never configures either; the CLI does, for its own output.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import structlog

__all__ = ["LOGGER_NAME", "EventLogger", "get_logger"]

#: The standard library logger (and structlog logger name) of every library event.
LOGGER_NAME: Final = "neotoma_agent"

_std = logging.getLogger(LOGGER_NAME)
# One lazy proxy: it reads the application's structlog configuration at each call.
_structured = structlog.get_logger(LOGGER_NAME)


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
        if structlog.is_configured():
            getattr(_structured, method)(event, **fields)
            return
        if not _std.isEnabledFor(level):
            return
        merged = {**structlog.contextvars.get_contextvars(), **fields}
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
