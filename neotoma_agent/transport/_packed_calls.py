"""How a history page carries its turns' tool calls: one row per call, the keys once.

A store that pages (the embedded store, the dev server) sends with each page of a
conversation the snapshots of the ``tool_invocation`` entities its turn records REFER_TO
(the ``tool_calls`` key, an extension a real server does not have). A turn reads the page
of its last few turns, so each call is sent again with each of the next few turns' pages:
as one JSON object per call, the same keys spelt out each time, those pages were the
largest part of what a turn with many calls sent and decoded. So the calls are packed:

    {"shapes": [["tool_invocation", "turn_key", "tool_name", ...], ...],
     "rows": [[shape, entity_id, observation_count, value, ...], ...]}

where a shape is an entity type followed by the snapshot's keys in their order, and a
row's values are that snapshot's values in the same order. Unpacking gives back exactly
the records a list of objects gives (``entity_id``, ``entity_type``, ``snapshot``,
``observation_count``): that form is still read, as any store may send it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ._lazy_json import PartlyDecoded

__all__ = ["TOOL_CALLS", "pack_tool_calls", "sends_tool_calls", "unpack_tool_calls"]

#: the page's key for its tool calls
TOOL_CALLS: Final = "tool_calls"


def pack_tool_calls(calls: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Snapshot records (``entity_id``, ``entity_type``, ``snapshot``,
    ``observation_count``) as the packed ``tool_calls`` value."""
    shapes: dict[tuple[str, ...], int] = {}
    rows: list[list[Any]] = []
    for call in calls:
        fields: Mapping[str, Any] = call["snapshot"]
        shape = shapes.setdefault((call["entity_type"], *fields), len(shapes))
        rows.append([shape, call["entity_id"], call["observation_count"], *fields.values()])
    return {"shapes": [list(shape) for shape in shapes], "rows": rows}


def sends_tool_calls(raw: Mapping[str, Any]) -> bool:
    """Whether a ``recent_conversation`` answer carries its turns' tool calls (packed or
    as a list), without reading them (nor decoding them, if the transport left them as
    text: see ``_lazy_json``)."""
    if type(raw) is PartlyDecoded:
        text = raw.pending(TOOL_CALLS)
        if text is not None:
            # A list, or an object with rows (its shapes come first, and are short).
            return text[:1] == "[" or (text[:1] == "{" and '"rows":' in text)
    calls = raw.get(TOOL_CALLS)
    return isinstance(calls, list) or (isinstance(calls, dict) and "rows" in calls)


def unpack_tool_calls(calls: object) -> list[Mapping[str, Any]]:
    """The snapshot records a ``tool_calls`` value holds, packed or as a list (a value of
    another shape, or a row that does not fit its shape, holds none)."""
    if isinstance(calls, list):
        return [c for c in calls if isinstance(c, Mapping)]
    if not isinstance(calls, Mapping):
        return []
    shapes, rows = calls.get("shapes"), calls.get("rows")
    if not isinstance(shapes, list) or not isinstance(rows, list):
        return []
    out: list[Mapping[str, Any]] = []
    for row in rows:
        if not isinstance(row, list) or len(row) < 3:
            continue
        index = row[0]
        shape = shapes[index] if type(index) is int and 0 <= index < len(shapes) else None
        if not isinstance(shape, list) or not shape or len(row) != len(shape) + 2:
            continue
        out.append(
            {
                "entity_id": row[1],
                "entity_type": shape[0],
                "snapshot": dict(zip(shape[1:], row[3:], strict=True)),
                "observation_count": row[2],
            }
        )
    return out
