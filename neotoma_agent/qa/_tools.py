"""The audit's look at tool calls: a ``tool_invocation`` whose turn is missing.

A turn's tool calls are written in its closing store, with its turn record, so the library
never leaves one without the other; another writer (or a deleted record) can. One paged scan
of the ``tool_invocation`` entities, then one snapshot read per distinct turn they name
(concurrently, bounded), so the cost grows with the turns that made calls, not with the
calls. A call whose ``turn_key`` is not a turn key at all is reported the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .._keys import parse_turn_key, tenant_for, turn_record_entity_id
from .._reads import gather_bounded, scan_entities, snapshot_or_none
from .._tools import TOOL_TYPE
from ..transport._base import Transport
from ._findings import Finding, FindingKind
from ._scan import timestamp
from ._severity import Severity

__all__ = ["tool_findings"]


async def tool_findings(
    transport: Transport,
    scope: str | None,
    since_at: float | None,
    concurrency: int,
) -> tuple[list[Finding], bool]:
    """Findings for tool calls whose turn record is missing, and whether the scan was partial."""
    scan = await scan_entities(transport, entity_type=TOOL_TYPE)
    # (conversation id, turn id) -> the calls naming that turn
    by_turn: dict[tuple[str, str], list[str]] = {}
    for entity in scan.entities:
        fields = entity.snapshot
        turn_key = fields.get("turn_key")
        invoked_at = fields.get("invoked_at")
        if (
            since_at is not None
            and isinstance(invoked_at, str)
            and timestamp(invoked_at) < since_at
        ):
            continue
        parsed = parse_turn_key(turn_key, scope) if isinstance(turn_key, str) else None
        cid, tid = (parsed[0], parsed[1]) if parsed is not None else ("", str(turn_key))
        if scope is not None and cid != scope:
            continue
        by_turn.setdefault((cid, tid), []).append(entity.entity_id)
    turns = sorted(by_turn)

    async def missing(turn: tuple[str, str]) -> bool:
        cid, tid = turn
        if not cid:
            return True
        rid = turn_record_entity_id(cid, tid, tenant_for(transport))
        record = await snapshot_or_none(transport, rid)
        return record is None or record.entity_type != "conversation_turn"

    gone = await gather_bounded([functools.partial(missing, t) for t in turns], concurrency)
    findings = [
        _finding(cid, tid, by_turn[(cid, tid)])
        for (cid, tid), lost in zip(turns, gone, strict=True)
        if lost
    ]
    return findings, scan.partial


def _finding(conversation_id: str, turn_id: str, tool_ids: Sequence[str]) -> Finding:
    count = len(tool_ids)
    return Finding(
        FindingKind.TOOL_CALL_WITHOUT_TURN,
        Severity.WARN,
        conversation_id,
        turn_id,
        f"{count} tool call{'s' if count != 1 else ''} of turn {turn_id} "
        f"{'are' if count != 1 else 'is'} stored but the turn's record is not.",
        tool_invocation_ids=tuple(sorted(tool_ids)),
    )
