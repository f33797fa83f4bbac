"""What two or more framework integrations share: small, generic, framework-free.

- :class:`NoFinalReply`: the error class a turn is abandoned with when the framework's run
  ended without a final reply (tool calls waiting for approval, a run cancelled by the
  framework's own "stop now", an interrupted graph). It is raised inside the turn's body
  only to abandon the turn; the caller never sees it.
- :func:`reply_text`: the stored text of a final output that may not be a ``str``.
- :func:`parts_text`: the stored text of a prompt given as a list of parts.
- :func:`missing_framework`: the ``ImportError`` a module raises when its framework is absent.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["NoFinalReply", "missing_framework", "parts_text", "reply_text"]


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
    return json.dumps(_plain(output), ensure_ascii=False, default=str)


def _plain(value: object) -> Any:
    # Dataclass instances become dicts (recursively) so json.dumps can hold them.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def parts_text(parts: Iterable[object], describe: Callable[[object], str | None]) -> str:
    """The stored text of a multi-part prompt: its text parts, one per line, in order.

    ``describe(part)`` returns the text of a part, or ``None`` for a part that has no text
    (an image, a file, audio): such a part is stored as a ``[kind]`` placeholder only when
    ``describe`` says so by returning it, so the stored message shows that something was
    attached without copying its bytes or URL.
    """
    lines = [text for text in map(describe, parts) if text is not None]
    return "\n".join(lines)
