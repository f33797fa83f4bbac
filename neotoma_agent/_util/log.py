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
from collections.abc import Mapping
from contextvars import ContextVar, Token
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


class bound_context:  # a lowercase name: used as a function, ``with bound_context(...):``
    """Bind ``fields`` (``conversation_id``, ``turn_id``) to every event logged within.

    Through ``structlog.contextvars`` when the application has configured structlog, as
    applications that use it expect (their own events within see the ids too); else in
    the library's own context variable, which every library event carries (a turn binds
    once each time it is entered: one context variable set and reset, not structlog's
    binding, while structlog is merely imported).
    """

    __slots__ = ("_fields", "_structlog", "_token")

    def __init__(self, **fields: Any) -> None:
        self._fields = fields
        self._structlog: contextlib.AbstractContextManager[Any] | None = None
        self._token: Token[Mapping[str, Any]] | None = None

    def __enter__(self) -> None:
        structlog = sys.modules.get("structlog")
        if structlog is not None and structlog.is_configured():
            self._structlog = structlog.contextvars.bound_contextvars(**self._fields)
            self._structlog.__enter__()
            return
        outer = _context.get()
        fields = self._fields
        self._token = _context.set(MappingProxyType({**outer, **fields} if outer else fields))

    def __exit__(self, *exc_info: object) -> None:
        bound, self._structlog = self._structlog, None
        if bound is not None:
            bound.__exit__(None, None, None)
            return
        token, self._token = self._token, None
        if token is not None:
            _context.reset(token)


class EventLogger:
    """``debug`` / ``info`` / ``warning`` / ``error``: one event name plus fields."""

    __slots__ = ()

    def enabled(self, level: int = logging.INFO) -> bool:
        """Whether an event at ``level`` goes anywhere: structlog is configured and its
        logger takes ``level`` (a filtering logger of ``make_filtering_bound_logger`` says
        which it drops; any other configured logger takes them all), or the standard
        library logger takes ``level``. The events of every turn are built only
        when it does (the library is silent by default, and a silent event costs nothing
        to skip)."""
        structlog = sys.modules.get("structlog")
        if structlog is not None and structlog.is_configured():
            return _structlog_takes(structlog, level)
        return _std.isEnabledFor(level)

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


# A configured structlog's answer to "does ``level`` go anywhere", by wrapper class and
# logger factory: its native filtering loggers (``make_filtering_bound_logger``) and its
# standard library ``BoundLogger`` answer ``is_enabled_for`` (the latter asks the ``logging``
# logger, whose level may change later: the answer is asked each time); a wrapper that
# cannot tell (or fails to) takes every level, so every event is built. Asked through a
# logger made once per configuration: making one (``get_logger().bind()``) costs ~6 us, a
# turn's check is one lookup.
_level_checks: dict[tuple[object, object], Any] = {}

# The last configuration asked about and its check: a turn asks four times, of one
# configuration, and finds it by identity.
_last: tuple[object, object, Any] = (None, None, None)


def _structlog_takes(structlog: Any, level: int) -> bool:
    global _last
    # structlog keeps its configuration in one object whose attributes ``configure()`` and
    # ``reset_defaults()`` set: reading the two a check depends on sees every change, where
    # ``get_config()`` builds a dict of all five (``enabled()``, four calls a turn, took
    # 7,700 instructions a call with it, 4,800 without). A structlog that keeps its
    # configuration elsewhere is asked through ``get_config()``.
    config: Any = getattr(getattr(structlog, "_config", None), "_CONFIG", None)
    try:
        wrapper, factory = config.default_wrapper_class, config.logger_factory
    except AttributeError:
        public = structlog.get_config()
        wrapper, factory = public["wrapper_class"], public["logger_factory"]
    last_wrapper, last_factory, check = _last
    if wrapper is not last_wrapper or factory is not last_factory:
        key = (wrapper, factory)
        check = _level_checks.get(key)
        if check is None:
            found = getattr(structlog.get_logger(LOGGER_NAME).bind(), "is_enabled_for", None)
            check = found if found is not None and _answers(found, level) else _takes_every_level
            _level_checks[key] = check
        _last = (wrapper, factory, check)
    return bool(check(level))


def _takes_every_level(level: int) -> bool:
    return True


def _answers(check: Any, level: int) -> bool:
    try:
        check(level)
    except Exception:  # e.g. the standard library's BoundLogger over a PrintLogger
        return False
    return True


_LOGGER: Final = EventLogger()


def get_logger() -> EventLogger:
    """The library's event logger."""
    return _LOGGER
