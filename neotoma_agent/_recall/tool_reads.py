"""Reading a turn's tool calls back: the one reader ``history``, ``tools`` and ``show`` share.

A turn record REFERS_TO each ``tool_invocation`` its closing store wrote, and counts them
(``tool_invocation_count``, declared). So a turn whose record counts none costs nothing to
read (stores written before tool calls were recorded read as before); one with calls costs
two round trips: the record's REFERS_TO edges, then each call's snapshot (name, status,
duration), concurrently. The arguments and results, which a real server keeps only on the
observation, take one ``list_observations`` per call instead (:func:`read_tool_details`,
for ``memory.tools``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .._records.tool_payload import (
    ARGS_FIELD,
    CALL_ID_FIELD,
    CHARS_SUFFIX,
    ERROR_CLASS_FIELD,
    RESULT_FIELD,
)
from .._records.tools import TOOL_TYPE as _TOOL_TYPE
from ..exceptions import NotFoundError
from ..transport._base import EntitySnapshot, Transport
from .paged import gather_bounded, snapshot_or_none

__all__ = [
    "StoredToolCall",
    "calls_by_turn_key",
    "read_tool_details",
    "read_tools_of",
    "read_turn_tools",
    "recorded_tool_count",
    "referred_tool_ids",
]

#: the turn record's declared count of its calls
COUNT_FIELD: Final = "tool_invocation_count"


@attrs.frozen
class StoredToolCall:
    """One tool call as the store holds it.

    ``name``, ``invoked_at``, ``status`` (``ok`` / ``error`` / ``cancelled``),
    ``duration_ms`` and ``entity_id`` come from the snapshot (what every reader gets, e.g.
    ``HistoryTurn.tools``). ``args``, ``result``, ``call_id`` and ``error_class`` come from
    the observation, read only by :meth:`NeotomaMemory.tools` (``None`` elsewhere); a value
    stored cut (longer than the memory's ``tool_payload_chars``) is its cut JSON text, and
    ``args_chars`` / ``result_chars`` then give the original length.
    """

    entity_id: str
    name: str
    invoked_at: str
    status: str
    duration_ms: float | None = None
    args: Any = None
    result: Any = None
    call_id: str | None = None
    error_class: str | None = None
    args_chars: int | None = None
    result_chars: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field, as plain JSON (``show --json`` carries this)."""
        return attrs.asdict(self)


def recorded_tool_count(record: EntitySnapshot | Mapping[str, Any] | None) -> int:
    """How many calls a turn record says its turn made (0 for records that do not say)."""
    if record is None:
        return 0
    fields = record.snapshot if isinstance(record, EntitySnapshot) else record
    count = fields.get(COUNT_FIELD)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _number(value: object) -> float | None:
    if type(value) is float or type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _str(value: object, default: str) -> str:
    # str(value or default), with the stored case (a non-empty str) first.
    if type(value) is str and value:
        return value
    return str(value or default)


def _call(entity_id: str, fields: Mapping[str, Any]) -> StoredToolCall:
    # Every call of the turns on a history page, on each of the next few turns' pages.
    get = fields.get
    return StoredToolCall(
        entity_id,
        _str(get("tool_name"), ""),
        _str(get("invoked_at"), ""),
        _str(get("result_status"), "unknown"),
        _number(get("duration_ms")),
    )


def calls_by_turn_key(
    snapshots: Iterable[EntitySnapshot], keys: Iterable[str] | None = None
) -> dict[str, tuple[StoredToolCall, ...]]:
    """Tool-call snapshots a store sent with a history page, grouped by their turn key
    (only those of ``keys``, when given: a page holds one turn more than it shows)."""
    grouped: dict[str, dict[str, Mapping[str, Any]]] = {}
    if keys is not None:
        grouped = {key: {} for key in keys}
    for snap in snapshots:  # pages may repeat a turn's calls: one each, by entity id
        fields = snap.snapshot
        key = fields.get("turn_key")
        if snap.entity_type == _TOOL_TYPE and isinstance(key, str):
            calls = grouped.get(key)
            if calls is None:
                if keys is not None:
                    continue
                calls = grouped[key] = {}
            calls[snap.entity_id] = fields
    return {
        key: _ordered([_call(entity_id, fields) for entity_id, fields in calls.items()])
        for key, calls in grouped.items()
        if calls
    }


async def referred_tool_ids(transport: Transport, record_id: str) -> list[str]:
    """The ``tool_invocation`` ids a turn record REFERS_TO (none if it is not stored)."""
    try:
        related = await transport.retrieve_related_entities(
            record_id, relationship_types=["REFERS_TO"], direction="outbound"
        )
    except NotFoundError:
        return []
    return list(dict.fromkeys(e.id for e in related.entities if e.entity_type == _TOOL_TYPE))


# The order calls are read in: by invoked_at, then name, then id (a C key: a history page
# sorts every call of its turns).
_ORDER: Final = operator.attrgetter("invoked_at", "name", "entity_id")


def _ordered(calls: Iterable[StoredToolCall | None]) -> tuple[StoredToolCall, ...]:
    return tuple(sorted([c for c in calls if c is not None], key=_ORDER))


async def read_turn_tools(transport: Transport, record_id: str) -> tuple[StoredToolCall, ...]:
    """The calls a turn record REFERS_TO, ordered by ``invoked_at``: the record's edges,
    then each call's snapshot, concurrently (two round trips)."""

    async def one(entity_id: str) -> StoredToolCall | None:
        snap = await snapshot_or_none(transport, entity_id)
        return None if snap is None else _call(entity_id, snap.snapshot)

    ids = await referred_tool_ids(transport, record_id)
    return _ordered(await gather_bounded([functools.partial(one, i) for i in ids]))


async def read_tools_of(
    transport: Transport, records: Sequence[EntitySnapshot | None], *, details: bool = False
) -> list[tuple[StoredToolCall, ...]]:
    """:func:`read_turn_tools` (or with ``details``, :func:`read_tool_details`) for each
    record that counts calls, concurrently (bounded)."""
    wanted = [i for i, r in enumerate(records) if recorded_tool_count(r) > 0]
    found: list[tuple[StoredToolCall, ...]] = [()] * len(records)
    if not wanted:
        return found
    read = read_tool_details if details else read_turn_tools
    ids = [r.entity_id for r in records if r is not None and recorded_tool_count(r) > 0]
    reads = [functools.partial(read, transport, i) for i in ids]
    for i, calls in zip(wanted, await gather_bounded(reads), strict=True):
        found[i] = calls
    return found


def _detailed(entity_id: str, fields: Mapping[str, Any]) -> StoredToolCall:
    def chars(name: str) -> int | None:
        value = fields.get(name + CHARS_SUFFIX)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return attrs.evolve(
        _call(entity_id, fields),
        args=fields.get(ARGS_FIELD),
        result=fields.get(RESULT_FIELD),
        call_id=_text(fields.get(CALL_ID_FIELD)),
        error_class=_text(fields.get(ERROR_CLASS_FIELD)),
        args_chars=chars(ARGS_FIELD),
        result_chars=chars(RESULT_FIELD),
    )


async def read_tool_details(transport: Transport, record_id: str) -> tuple[StoredToolCall, ...]:
    """The calls a turn record REFERS_TO, with what each one's observation keeps (the
    arguments and result): the record's edges, then one observation read per call."""

    async def one(entity_id: str) -> StoredToolCall | None:
        try:
            observations = await transport.list_observations(entity_id)
        except NotFoundError:
            return None
        for observation in observations.observations:  # newest first
            if observation.fields.get("tool_name") is not None:
                return _detailed(entity_id, observation.fields)
        return None

    ids = await referred_tool_ids(transport, record_id)
    return _ordered(await gather_bounded([functools.partial(one, i) for i in ids]))
