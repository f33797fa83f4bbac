"""What a stored tool call keeps: the ``tool_invocation`` request element of one call.

The declared fields a real Neotoma 0.22.0 server keeps in the snapshot first, then what only
the observation keeps (the call id, the error class, the arguments and the result), the
values redacted and capped as the memory's settings say. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Protocol, get_args

from .._neotoma.js import compact_encoder
from .._util.log import get_logger
from ..transport._spliced import encoded
from .text import check_plain
from .tools import TOOL_TYPE, ToolCall

__all__ = [
    "ARGS_FIELD",
    "CALL_ID_FIELD",
    "CHARS_SUFFIX",
    "DEFAULT_PAYLOADS",
    "DEFAULT_TOOL_PAYLOAD_CHARS",
    "ERROR_CLASS_FIELD",
    "RESULT_FIELD",
    "SUMMARY_CHARS",
    "ToolPayloadMode",
    "ToolPayloads",
    "ToolRedactor",
    "summarize",
    "tool_entity",
]

logger = get_logger()

#: What a stored call keeps of its arguments and result (``NeotomaMemory(tool_payloads=)``).
ToolPayloadMode = Literal["full", "summary", "none"]
_MODES: Final[tuple[ToolPayloadMode, ...]] = get_args(ToolPayloadMode)

#: The default cap on each stored argument or result value, in characters of compact JSON.
DEFAULT_TOOL_PAYLOAD_CHARS: Final = 4096
#: The length of a summary (``tool_payloads="summary"``, and what ``show`` prints).
SUMMARY_CHARS: Final = 120

# Undeclared fields of a tool_invocation observation (the snapshot drops them).
ARGS_FIELD: Final = "arguments"
RESULT_FIELD: Final = "result"
CALL_ID_FIELD: Final = "call_id"
ERROR_CLASS_FIELD: Final = "error_class"
#: the original length (compact JSON characters) of a value stored cut
CHARS_SUFFIX: Final = "_chars"


class ToolRedactor(Protocol):
    """``redact_tool(tool_name, field, value)``: what to store of an argument or result.

    ``field`` is ``"args"`` or ``"result"``; return the value to store (plain JSON), e.g.
    with secrets masked. It sees the value before the cap applies. If it raises, neither
    value of that call is stored (a marker says so, and a WARNING is logged): a failing
    redactor never leaks what it was meant to hide, nor loses the turn.
    """

    def __call__(self, tool_name: str, field: Literal["args", "result"], value: Any) -> Any: ...


class ToolPayloads:
    """What a stored call keeps of its arguments and result (the memory's settings)."""

    # A plain class, not attrs: a coding-agent hook's Stop (a fresh process per event)
    # builds one to store a turn's tool calls.
    __slots__ = ("max_chars", "mode", "redact")

    def __init__(
        self,
        mode: ToolPayloadMode = "full",
        max_chars: int = DEFAULT_TOOL_PAYLOAD_CHARS,
        redact: ToolRedactor | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"tool_payloads must be one of {list(_MODES)}, got {mode!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"tool_payload_chars must be an int >= 1, got {max_chars!r}")
        if redact is not None and not callable(redact):
            raise TypeError("redact_tool must be callable")
        self.mode: ToolPayloadMode = mode
        self.max_chars = max_chars
        self.redact = redact

    def __repr__(self) -> str:
        return f"ToolPayloads(mode={self.mode!r}, max_chars={self.max_chars!r})"


#: What the memory stores when nothing is configured.
DEFAULT_PAYLOADS: Final = ToolPayloads()

_STORED_AS: Final[tuple[tuple[Literal["args", "result"], str], ...]] = (
    ("args", ARGS_FIELD),
    ("result", RESULT_FIELD),
)

# Stored in place of both values when the redactor failed.
_REDACTION_FAILED: Final = "[not stored: redact_tool raised]"


# Built once (json.dumps with these options builds an encoder per call); what is stored was
# checked plain (acyclic, finite) when recorded, so no cycle check.
_dumps: Final = compact_encoder(allow_nan=False, check_circular=False)
_encode_str: Final = json.encoder.encode_basestring  # what _dumps writes for a str
_TYPE_JSON: Final = '{"entity_type":' + _encode_str(TOOL_TYPE)
# The JSON of the strings that repeat call after call (turn keys, tool names, harnesses).
_ENCODED: dict[str, str] = {}
_MAX_ENCODED: Final = 1024


def _encoded(text: str) -> str:
    found = _ENCODED.get(text)
    if found is None:
        if len(_ENCODED) >= _MAX_ENCODED:
            _ENCODED.clear()  # a bound, not an LRU: a process sees few turn keys at once
        found = _ENCODED[text] = _encode_str(text)
    return found


def _compact(value: Any) -> str:
    try:
        return _dumps(value)
    except (TypeError, ValueError):
        # summarize() also takes values never checked (what a store gave back): the
        # reference encoder's errors, as json.dumps raises them.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def summarize(value: Any, max_chars: int = SUMMARY_CHARS) -> str:
    """``value`` as one line of compact JSON, cut to ``max_chars`` with ``…[+N chars]``."""
    text = value if isinstance(value, str) and _is_cut(value) else _compact(value)
    return _cut(text, max_chars)


def _is_cut(text: str) -> bool:
    return text.endswith(" chars]") and "…[+" in text


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}…[+{len(text) - max_chars} chars]"


def _kept(value: Any, payloads: ToolPayloads) -> tuple[Any, int | None, str | None]:
    # (what to store, the original length when it is stored cut, the compact JSON of what
    # is stored when measuring made it: the request splices it in rather than serialising
    # the value again)
    if payloads.mode == "summary":
        text = _compact(value)
        limit = min(SUMMARY_CHARS, payloads.max_chars)
        return _cut(text, limit), (len(text) if len(text) > limit else None), None
    if isinstance(value, str) and 6 * len(value) + 2 <= payloads.max_chars:
        # Short enough whatever JSON escapes (at most 6 characters each, and the quotes):
        # no need to serialise it to measure it.
        return value, None, None
    text = _compact(value)
    if len(text) <= payloads.max_chars:
        return value, None, text
    return _cut(text, payloads.max_chars), len(text), None


def tool_entity(
    call: ToolCall, turn_key: str, harness: str | None, payloads: ToolPayloads = DEFAULT_PAYLOADS
) -> dict[str, Any]:
    """The ``tool_invocation`` request element of one call (a fixed key order).

    The declared fields first (the snapshot), then what only the observation keeps: the
    call id, the error class, and the arguments and result as ``payloads`` says (redacted,
    then capped: a value longer than the cap is stored as its compact JSON cut with a
    ``…[+N chars]`` marker, and ``arguments_chars`` / ``result_chars`` hold the original
    length).
    """
    entity: dict[str, Any] = {
        "entity_type": TOOL_TYPE,
        "turn_key": turn_key,
        "tool_name": call.name,
        "invoked_at": call.invoked_at,
    }
    if call.duration_ms is not None:
        entity["duration_ms"] = call.duration_ms
    entity["result_status"] = call.status
    if harness is not None:
        entity["harness"] = harness
    if call.call_id is not None:
        entity[CALL_ID_FIELD] = call.call_id
    if call.error_class is not None:
        entity[ERROR_CLASS_FIELD] = call.error_class
    if payloads.mode == "none":
        return encoded(entity, write=_element_json, kept=_NO_TEXTS)
    values: dict[Literal["args", "result"], Any] = {"args": call.args, "result": call.result}
    if payloads.redact is not None:
        redact = payloads.redact
        try:
            values = {
                field: None
                if value is None
                else check_plain("what redact_tool returned", redact(call.name, field, value))
                for field, value in values.items()
            }
        except Exception as exc:
            logger.warning(
                "tool.redaction_failed", tool_status=call.status, error=type(exc).__name__
            )
            entity[ARGS_FIELD] = _REDACTION_FAILED
            return encoded(entity, write=_element_json, kept=_NO_TEXTS)
    texts: list[str | None] = []
    for field, stored_as in _STORED_AS:
        value = values[field]
        if value is None:
            texts.append(None)
            continue
        kept, original, text = _kept(value, payloads)
        entity[stored_as] = kept
        texts.append(text)
        if original is not None:
            entity[stored_as + CHARS_SUFFIX] = original
    # The element's JSON is written when first read (see EncodedEntity), from the texts
    # measuring the stored values made.
    return encoded(entity, write=_element_json, kept=texts)


_NO_TEXTS: Final[tuple[None, None]] = (None, None)


def _element_json(entity: Mapping[str, Any], texts: Sequence[str | None]) -> str:
    """What ``json.dumps(entity, ensure_ascii=False, separators=(",", ":"))`` writes for an
    element :func:`tool_entity` built: its keys in their fixed order ("{", the items
    joined by ",", "}"), the values as json's C encoder writes them, and the stored
    arguments' and result's own texts where measuring them made one."""
    get = entity.get
    invoked_at = entity["invoked_at"]
    # invoked_at is in the stored form (digits, "-", ":", ".", "T", "Z": nothing to
    # escape); a turn's calls share its key and mostly a few tool names: encoded once.
    out = [
        f'{_TYPE_JSON},"turn_key":{_encoded(entity["turn_key"])}'
        f',"tool_name":{_encoded(entity["tool_name"])},"invoked_at":"{invoked_at}"'
    ]
    duration = get("duration_ms")
    if duration is not None:
        number = float.__repr__ if type(duration) is float else int.__repr__
        out.append(f',"duration_ms":{number(duration)}')  # as json's C encoder writes them
    out.append(f',"result_status":"{entity["result_status"]}"')  # a word of the vocabulary
    harness = get("harness")
    if harness is not None:
        out.append(f',"harness":{_encoded(harness)}')
    # A call id is new with each call: not worth keeping encoded.
    for field in (CALL_ID_FIELD, ERROR_CLASS_FIELD):
        value = get(field)
        if value is not None:
            out.append(f',"{field}":{_encode_str(value)}')
    for (_, stored_as), text in zip(_STORED_AS, texts, strict=True):
        if stored_as not in entity:
            continue
        value = entity[stored_as]
        if text is None:
            text = _encode_str(value) if type(value) is str else _dumps(value)
        out.append(f',"{stored_as}":{text}')
        original = get(stored_as + CHARS_SUFFIX)
        if original is not None:
            out.append(f',"{stored_as}{CHARS_SUFFIX}":{original:d}')
    out.append("}")
    return "".join(out)
