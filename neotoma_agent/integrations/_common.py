"""What two or more framework integrations share: small, generic, framework-free.

- :class:`NoFinalReply`: the error class a turn is abandoned with when the framework's run
  ended without a final reply (tool calls waiting for approval, a run cancelled by the
  framework's own "stop now", an interrupted graph). It is raised inside the turn's body
  only to abandon the turn; the caller never sees it.
- :func:`reply_text`: the stored text of a final output that may not be a ``str``.
- :func:`parts_text`: the stored text of a prompt given as a list of parts.
- :func:`missing_framework`: the ``ImportError`` a module raises when its framework is absent.
- :func:`record_call`: record one tool call the framework ran on the turn, never failing it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Literal

from neotoma_agent import NeotomaError, Turn, TurnState

__all__ = [
    "NoFinalReply",
    "error_class",
    "missing_framework",
    "parts_text",
    "plain",
    "record_call",
    "reply_text",
]

_log = logging.getLogger("neotoma_agent.integrations")


class NoFinalReply(Exception):
    """Recorded as a turn's error class when the agent's run ended without a final reply.

    The turn is stored ``abandoned`` with the text the user saw (never an approval request
    or an empty output stored as a completed reply); the run's own result is still returned
    to the caller, who may resume it.
    """

    __module__ = "neotoma_agent.integrations"


def missing_framework(module: str, framework: str, extra: str, note: str = "") -> ImportError:
    """The ``ImportError`` for ``module`` imported without ``framework`` installed."""
    return ImportError(
        f"{module} needs {framework}: pip install 'neotoma-agent[{extra}]'{note}",
        name=module,
    )


def reply_text(output: object) -> str:
    """The text stored as the reply for a final output.

    A ``str`` is stored as it is. Anything else (a pydantic model, a dataclass, a dict, a
    list, a number) is stored as its JSON: pydantic's JSON when the object has
    ``model_dump_json`` (every pydantic model), else plain JSON of dataclasses and JSON
    values, with non-ASCII kept; ``str(output)`` for what JSON cannot hold. ``None`` is not
    a reply: callers treat it as :class:`NoFinalReply`.
    """
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    return json.dumps(output, ensure_ascii=False, default=_jsonable)


def _jsonable(value: object) -> Any:
    # What json.dumps cannot hold: pydantic models and dataclasses as their fields, the
    # rest (datetimes, UUIDs, paths) as their str.
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def plain(value: object) -> Any:
    """``value`` as plain JSON (what a tool call's args and result must be), by the same
    rules as :func:`reply_text`; a value JSON cannot hold at all becomes its ``str``."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=_jsonable))
    except (TypeError, ValueError):  # a cycle, a non-str key
        return str(value)


def error_class(exc: BaseException) -> str:
    """An exception's class as a turn records it: ``ValueError``, or ``module.QualName``."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def record_call(
    turn: Turn | None,
    name: str,
    *,
    args: object,
    result: object = None,
    failure: BaseException | None = None,
    invoked_at: datetime.datetime,
    duration_ms: float,
    call_id: str | None,
) -> None:
    """Record one call the framework ran on ``turn`` (if it is open); never raise.

    ``failure``: the exception the call ended with (``cancelled`` for a cancellation,
    ``error`` otherwise, its class kept). A record the tool-call API refuses (a call id
    seen with other content) is logged at WARNING and left out: recording a call must not
    fail the run that made it.
    """
    if turn is None or turn.state is not TurnState.OPEN:
        return
    status: Literal["ok", "error", "cancelled"]
    if failure is None:
        status = "ok"
    elif isinstance(failure, (asyncio.CancelledError, KeyboardInterrupt)):
        status = "cancelled"
    else:
        status = "error"
    try:
        turn.record_tool(
            name,
            args=plain(args),
            result=None if failure is not None else plain(result),
            status=status,
            invoked_at=invoked_at,
            duration_ms=duration_ms,
            call_id=call_id,
            error_class=None if failure is None else error_class(failure),
        )
    except (TypeError, ValueError, NeotomaError) as exc:
        _log.warning("integrations.tool_not_recorded: %s", type(exc).__name__)


def parts_text(parts: Iterable[object], describe: Callable[[object], str | None]) -> str:
    """The stored text of a multi-part prompt: its text parts, one per line, in order.

    ``describe(part)`` returns the text of a part, or ``None`` for a part that has no text
    (an image, a file, audio): such a part is stored as a ``[kind]`` placeholder only when
    ``describe`` says so by returning it, so the stored message shows that something was
    attached without copying its bytes or URL.
    """
    lines = [text for text in map(describe, parts) if text is not None]
    return "\n".join(lines)
