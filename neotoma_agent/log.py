"""The library's event logger, for code that logs alongside it.

Every event the library logs goes through one logger: structured through structlog when the
application configured structlog, else to the standard library's ``logging`` logger named
:data:`LOGGER_NAME` (``"neotoma_agent"``), so nothing below WARNING shows by default. The
library never configures either and never prints (see the configuration guide).

A tool built on the library (a command line, a web view, a repair job) logs its own events
the same way, so that one configuration shows or hides them all::

    from neotoma_agent.log import get_logger

    log = get_logger()
    log.info("import.batch_done", turns=256)  # an event name, then fields
    log.warning("import.line_refused", line=17, error="ValidationError 400")

Fields whose values cost something to build can wait for :meth:`EventLogger.enabled`
(``if log.enabled(): log.info(...)``), as the library's own per-turn events do.

Fields are the event's data: ids, counts, error labels
(:func:`neotoma_agent.exceptions.error_label`), never message content or tokens.
:data:`LOGGER_NAME` is the name to configure (``logging.getLogger(LOGGER_NAME)``).
"""

from __future__ import annotations

from typing import Final

from ._util.log import LOGGER_NAME as _LOGGER_NAME
from ._util.log import EventLogger as EventLogger
from ._util.log import get_logger as get_logger

__all__ = ["LOGGER_NAME", "EventLogger", "get_logger"]

#: The name of the library's logger: the standard library ``logging`` logger, and the
#: structlog logger name, of every event the library logs.
LOGGER_NAME: Final[str] = _LOGGER_NAME

for _value in (EventLogger, get_logger):
    # Reprs and help() name the namespace users import from, not the private module.
    _value.__module__ = __name__
del _value
