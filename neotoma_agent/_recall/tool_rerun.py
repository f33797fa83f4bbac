"""The read a re-run's closing store makes when its tool calls ran again: what the earlier
run stored of each call (``_engine.close.calls_as_stored`` decides what to do with it).

A call's ``invoked_at`` and ``duration_ms`` are clock readings; a re-run of a turn whose
closing store landed runs its calls again, so its store is refused as a mismatch although it
holds the same calls. Then (only then) the turn machine asks for the calls the turn record
REFERS_TO (``_engine.requests.ToolObservations``), and this reads them: the record's edges,
then each call's observations, concurrently.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ..exceptions import NotFoundError
from ..transport._base import Transport
from .paged import gather_bounded
from .tool_reads import referred_tool_ids

__all__ = ["stored_tool_fields"]


async def _stored_fields(transport: Transport, entity_id: str) -> list[Mapping[str, Any]]:
    try:
        observations = await transport.list_observations(entity_id)
    except NotFoundError:
        return []
    return [o.fields for o in observations.observations if "invoked_at" in o.fields]


async def stored_tool_fields(transport: Transport, record_id: str) -> list[list[Mapping[str, Any]]]:
    """The fields of the observations (those holding an ``invoked_at``) of each tool call
    turn record ``record_id`` REFERS_TO; none for a record that is not stored."""
    ids = await referred_tool_ids(transport, record_id)
    return await gather_bounded([functools.partial(_stored_fields, transport, i) for i in ids])
