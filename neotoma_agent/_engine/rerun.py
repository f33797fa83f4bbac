"""A re-run's tool calls take the clock readings an earlier run of the turn stored.

A call's ``invoked_at`` and ``duration_ms`` are clock readings (``t.tool`` takes them when the
call runs), and ``invoked_at`` is part of the call's identity. A re-run of a turn whose
closing store landed runs its calls again, later and for another while, so its closing store
differs from the stored one under the same key and is refused as a mismatch, although it
holds the same calls. Then (only then) the machine asks for the calls the turn record
REFERS_TO (:class:`~.requests.ToolObservations`), and when each call of this run equals a
stored one but for those two readings, in the same order, the run takes the stored readings:
its closing store becomes a replay. Any other difference (a name, an argument, a result, a
status) still stands as a mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .closing import META_FIELDS, TOOL_CLOCK_FIELDS

if TYPE_CHECKING:
    from .._records.tools import ToolCall

__all__ = ["calls_as_stored"]

# What tells two calls apart: all but the clock readings, the fields a store adds, and the
# type (which a request element carries beside its fields).
_NOT_CONTENT: Final = TOOL_CLOCK_FIELDS | META_FIELDS | {"entity_type"}


def _content(fields: Mapping[str, Any]) -> str:
    # A call's request element or stored fields but for its clock readings, as a key (in
    # sorted order: a store need not keep the order fields were sent in).
    kept = {k: v for k, v in fields.items() if k not in _NOT_CONTENT}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def calls_as_stored(
    found: Sequence[Sequence[Mapping[str, Any]]],
    calls: Sequence[ToolCall],
    elements: Sequence[Mapping[str, Any]],
    tries: int,
) -> list[list[ToolCall]]:
    """``calls`` with the clock readings of the same calls an earlier run of the turn
    stored (``found``: the stored fields of each call the turn record REFERS_TO, the
    answer to :class:`~.requests.ToolObservations`): one list per earlier run that could
    have stored them (the newest first, at most ``tries``), none when some call has no
    stored twin (the mismatch is real).

    ``elements`` are the calls' request elements (what the closing store sends of each:
    redacted and capped), compared without their clock readings. Each
    earlier run stored each call's content as often as this one makes it: the twins of a
    content, in the order they were invoked, fall into runs of that many (several runs'
    calls when the turn was abandoned differently, then re-run), and calls alike pair in
    order within one.
    """
    if not calls:
        return []
    import attrs  # here: only a re-run with calls gets this far

    twins: dict[str, list[Mapping[str, Any]]] = {}
    for fields in sorted(
        (fields for per_entity in found for fields in per_entity),
        key=lambda f: str(f.get("invoked_at")),
    ):
        twins.setdefault(_content(fields), []).append(fields)
    wanted: dict[str, list[int]] = {}
    for index in sorted(range(len(calls)), key=lambda i: calls[i].invoked_at):
        wanted.setdefault(_content(elements[index]), []).append(index)
    runs = min(len(twins.get(content, ())) // len(same) for content, same in wanted.items())
    candidates = []
    for run in reversed(range(max(0, runs - tries), runs)):
        adopted = list(calls)
        for content, same in wanted.items():
            stored = twins[content][run * len(same) : (run + 1) * len(same)]
            for index, twin in zip(same, stored, strict=True):
                duration = twin.get("duration_ms")
                adopted[index] = attrs.evolve(
                    calls[index],
                    invoked_at=twin["invoked_at"],
                    duration_ms=duration if isinstance(duration, int | float) else None,
                )
        candidates.append(adopted)
    return candidates
