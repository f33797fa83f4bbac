"""``audit``: read a store back and find every turn that broke "both halves or neither".

A crash or a kill between a turn's two stores leaves an *orphan*: a user message whose turn
record still says ``open`` and no reply. The audit finds those and the rarer breakages, and
with ``repair=True`` closes each one honestly (never inventing a reply).

It reads through the :class:`~neotoma_agent.Transport` only, so it runs unchanged on the
embedded store and on a Neotoma server. The reads, chosen so that their number grows with
conversations rather than with messages:

1. page through every ``conversation`` and every ``conversation_turn`` (the turn records,
   whose ``status`` says ``open`` / ``completed`` / ``abandoned``), concurrently;
2. one ``retrieve_related_entities`` per conversation (inbound ``PART_OF``): the messages
   that hang off it, named by their ``turn_key``;
3. a ``get_entity_snapshot`` only where a turn lacks a message it should have, to tell a
   missing message from one that exists outside any conversation.

A message with neither a turn record nor a ``PART_OF`` edge is invisible to these reads; the
turn protocol never writes one (the user store writes message, record and edge together),
but another writer may: ``thorough=True`` also pages through every message to find them.

This module holds the entry point (:func:`audit`), the report (:class:`AuditReport`) and the
repair pass; the reads are in :mod:`._scan`, the judging of each turn in :mod:`._findings`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

from .. import EntitySnapshot, NeotomaMemory, Transport
from ..log import get_logger
from ..reads import (
    gather_bounded,
    identify,
    message_entity_id,
    snapshot_or_none,
    tenant_for,
    turn_record_entity_id,
    validate_conversation_id,
)
from ._findings import Finding, FindingKind, classify, sort_key
from ._repair import RepairResult, apply_repairs
from ._scan import Auditor, TurnState, parse_timestamp, read_scoped, timestamp
from ._stream import StreamingAuditor, read_all, store_reads
from ._tools import tool_findings

__all__ = [
    "AUDIT_CLOSE_TIMEOUT",
    "AUDIT_DEFAULT_MIN_AGE",
    "AUDIT_REPLY_MARGIN",
    "AuditReport",
    "Finding",
    "FindingKind",
    "audit",
]

logger = get_logger()

#: the page size of the audit's scans (a module global so that tests can shrink it)
_PAGE: Final = 500


def _default_close_timeout() -> float:
    # Read from the class, not repeated here, so that the audit follows the library.
    default = attrs.fields(NeotomaMemory).close_timeout.default
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        raise TypeError("NeotomaMemory.close_timeout has no numeric default")
    return float(default)


#: seconds ``NeotomaMemory`` lets a closing store run by default (its ``close_timeout``):
#: one of the two parts of :data:`AUDIT_DEFAULT_MIN_AGE`
AUDIT_CLOSE_TIMEOUT: Final[float] = _default_close_timeout()
#: seconds an agent may still be writing its reply: a turn writes nothing between its
#: opening store and its closing one, however long the model streams or tools run; the
#: other part of :data:`AUDIT_DEFAULT_MIN_AGE`
AUDIT_REPLY_MARGIN: Final[float] = 300.0
#: the default ``min_age``: an open turn younger than this may still be running (its agent
#: writing the reply, then up to ``close_timeout`` closing it), so it is never repaired as
#: abandoned unless asked with an explicit ``min_age``
AUDIT_DEFAULT_MIN_AGE: Final[float] = AUDIT_CLOSE_TIMEOUT + AUDIT_REPLY_MARGIN


@attrs.frozen
class AuditReport:
    """What :func:`audit` read, found and (with ``repair=True``) repaired."""

    findings: tuple[Finding, ...]
    #: the problem findings still unresolved after this run's repairs
    remaining: tuple[Finding, ...]
    #: one result per repaired turn (empty without ``repair=True``)
    repairs: tuple[RepairResult, ...] = ()
    #: conversations whose messages were read
    conversations: int = 0
    #: turns examined (after ``since``)
    turns: int = 0
    #: messages seen in those turns
    messages: int = 0
    #: open turns left alone because they were written less than ``min_age`` seconds ago
    skipped_recent: int = 0
    #: those turns, as ``(conversation_id, turn_id)``, sorted
    skipped_turns: tuple[tuple[str, str], ...] = ()
    #: the ``min_age`` (seconds) the audit ran with
    min_age: float = 0.0
    #: a server refused to page through every entity, so some turns were not examined
    #: (a Neotoma server caps query offsets at 2,000); a partial audit is never clean
    partial: bool = False
    conversation_id: str | None = None
    since: str | None = None
    duration_ms: float = attrs.field(default=0.0, eq=False)

    @property
    def skipped_reason(self) -> str:
        """Why the :attr:`skipped_turns` were left alone, as ``to_json()`` and
        ``neotoma-agent audit`` word it."""
        return f"younger than --min-age {self.min_age:g}s: may still be running"

    @property
    def problems(self) -> tuple[Finding, ...]:
        """Findings that are ``warn`` or ``error`` (found before any repair)."""
        return tuple(f for f in self.findings if f.problem)

    @property
    def orphans(self) -> tuple[Finding, ...]:
        """The orphan turns found."""
        return tuple(f for f in self.findings if f.kind is FindingKind.ORPHAN_TURN)

    @property
    def abandoned(self) -> tuple[Finding, ...]:
        """The turns closed as abandoned (informational)."""
        return tuple(f for f in self.findings if f.kind is FindingKind.ABANDONED_TURN)

    @property
    def clean(self) -> bool:
        """True when every turn was examined and no problem remains (after repairs)."""
        return not self.remaining and not self.partial

    def to_json(self) -> Mapping[str, Any]:
        """The report as plain JSON (what ``neotoma-agent audit --json`` prints)."""
        return {
            "clean": self.clean,
            "conversation_id": self.conversation_id,
            "since": self.since,
            "conversations": self.conversations,
            "turns": self.turns,
            "messages": self.messages,
            "skipped_recent": self.skipped_recent,
            "skipped": {
                "count": self.skipped_recent,
                "min_age": self.min_age,
                "reason": self.skipped_reason,
                "turns": [{"conversation_id": c, "turn_id": t} for c, t in self.skipped_turns],
            },
            "partial": self.partial,
            "duration_ms": round(self.duration_ms, 3),
            "findings": [dict(f.to_json()) for f in self.findings],
            "remaining": [dict(f.to_json()) for f in self.remaining],
            "repairs": [dict(r.to_json()) for r in self.repairs],
        }


async def audit(
    transport: Transport,
    *,
    conversation_id: str | None = None,
    since: datetime | str | None = None,
    repair: bool = False,
    min_age: float = AUDIT_DEFAULT_MIN_AGE,
    thorough: bool = False,
    concurrency: int = 8,
) -> AuditReport:
    """Find every turn that broke "both halves or neither"; with ``repair=True``, close them.

    Finds orphan turns (a user message, no reply, turn record ``open`` or missing), replies
    without their user message, turn records without messages, turns whose record was never
    closed although both messages are stored, messages not ``PART_OF`` any conversation, tool
    calls whose turn record is missing, and (as ``info``) abandoned turns. Findings come
    sorted by conversation, turn and kind.

    ``conversation_id`` limits the audit to one conversation; ``since`` (an aware datetime
    or an ISO 8601 string) to turns written at or after it. ``min_age`` (seconds) leaves
    alone open turns written more recently than that: on a live store they may still be
    running. It defaults to :data:`AUDIT_DEFAULT_MIN_AGE`, ``NeotomaMemory``'s default
    ``close_timeout`` plus 5 minutes for an agent still writing its reply (a turn writes
    nothing between its two stores), so that a repair never closes a running turn; pass
    ``min_age=0`` to audit every turn, e.g. when no agent writes to the store. The report
    counts and names the turns it left alone (``skipped_recent``, ``skipped_turns``).
    ``thorough`` also pages through every message, to find messages that have
    neither a turn record nor a ``PART_OF`` edge (never written by this library).

    ``repair=True`` runs each problem's repair through :func:`apply_repairs` (one
    ``neotoma_repair`` per turn): an orphan is recorded ``abandoned`` with reason
    ``orphan_found_by_audit``, a missing ``PART_OF`` edge is added, an unclosed record is
    completed. Each turn is re-read just before its repair, and left alone if someone
    closed it meanwhile. Repairs are idempotent: a second run writes nothing new. A reply
    without its question cannot be repaired (its text is unknown) and stays in
    ``remaining``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if min_age < 0:
        raise ValueError("min_age must be >= 0 seconds")
    scope = None if conversation_id is None else validate_conversation_id(conversation_id)
    since_at, since_text = _since(since)
    started = time.perf_counter()
    await identify(transport)  # the ids derived below are the server's for a token's user
    timed = since_at is not None or min_age > 0
    auditor: Auditor
    # the conversations whose messages were read, by entity id
    conversations: Collection[str]
    if scope is None:
        # The whole store, streamed: only the turns that may be findings stay in memory.
        auditor = StreamingAuditor(
            transport, None, thorough, concurrency, timed=timed, page_size=_PAGE, since_at=since_at
        )
        read: set[str] = set()
        await read_all(auditor, read, concurrency, store_reads(transport, auditor))
        conversations = read
    else:
        auditor = Auditor(transport, scope, thorough, concurrency, timed=timed, page_size=_PAGE)
        # conversation entity id -> its snapshot (None: known only by its derived id)
        found: dict[str, EntitySnapshot | None] = {}
        await read_scoped(auditor, found, scope, concurrency)
        conversations = found.keys()

    def included(state: TurnState) -> bool:
        if since_at is None:
            return True
        activity = state.activity
        return activity is None or timestamp(activity) >= since_at

    selected = [s for s in auditor.turns.values() if included(s)]
    incomplete = [s for s in selected if s.user is None or s.assistant is None]
    await gather_bounded([functools.partial(auditor.verify, s) for s in incomplete], concurrency)
    abandoned = [s for s in selected if s.status == "abandoned"]
    await gather_bounded(
        [functools.partial(auditor.read_ending, s) for s in abandoned], concurrency
    )

    now = time.time()
    findings: list[Finding] = []
    skipped: list[tuple[str, str]] = []
    for state in selected:
        if state.fine:
            continue  # the common case: both halves, in the conversation, closed
        conv_entity = next(
            (
                m.conversation_entity_id
                for m in (state.user, state.assistant)
                if m is not None and m.conversation_entity_id
            ),
            None,
        )
        turn_findings = classify(state, conv_entity, conversations, tenant_for(transport))
        if min_age > 0 and any(f.kind is not FindingKind.ABANDONED_TURN for f in turn_findings):
            activity = state.activity
            if activity is not None and timestamp(activity) > now - min_age:
                skipped.append((state.conversation_id, state.turn_id))
                continue
        findings.extend(turn_findings)
    calls, calls_partial = await tool_findings(transport, scope, since_at, concurrency)
    findings.extend(calls)
    findings.sort(key=sort_key)

    repairs: tuple[RepairResult, ...] = ()
    remaining = tuple(f for f in findings if f.problem)
    if repair and remaining:
        repairs, remaining = await _repair(transport, remaining, concurrency)

    report = AuditReport(
        findings=tuple(findings),
        remaining=remaining,
        repairs=repairs,
        conversations=len(conversations),
        turns=len(selected) + auditor.fine_turns,
        messages=sum((s.user is not None) + (s.assistant is not None) for s in selected)
        + auditor.fine_messages,
        skipped_recent=len(skipped),
        skipped_turns=tuple(sorted(skipped)),
        min_age=min_age,
        partial=auditor.partial or calls_partial,
        conversation_id=scope,
        since=since_text,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
    logger.info(
        "audit.done",
        conversation_id=scope,
        conversations=report.conversations,
        turns=report.turns,
        problems=len(report.problems),
        orphans=len(report.orphans),
        repaired=sum(1 for r in repairs for o in r.outcomes if o.ok),
        remaining=len(report.remaining),
        ms=round(report.duration_ms, 3),
    )
    return report


def _since(value: datetime | str | None) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        try:
            return parse_timestamp(value), value
        except ValueError:
            raise ValueError(f"since must be an ISO 8601 timestamp, got {value!r}") from None
    if value.tzinfo is None:
        raise ValueError("since must be timezone-aware (store timestamps are UTC)")
    return value.timestamp(), value.isoformat()


async def _still_broken(transport: Transport, finding: Finding) -> bool:
    """Re-read a turn just before repairing it: a live turn may have closed meanwhile."""
    cid, tid = finding.conversation_id, finding.turn_id
    if finding.kind is FindingKind.MESSAGE_NOT_IN_CONVERSATION:
        return True  # adding an edge that appeared meanwhile is harmless
    record = await snapshot_or_none(
        transport,
        finding.turn_record_id or turn_record_entity_id(cid, tid, tenant=tenant_for(transport)),
    )
    status = record.snapshot.get("status") if record is not None else None
    if status != finding.record_status:
        return False
    if finding.kind is FindingKind.UNCLOSED_TURN:
        return True
    # An orphan stays one only while no reply exists.
    reply = message_entity_id(cid, tid, "assistant", tenant=tenant_for(transport))
    return await snapshot_or_none(transport, reply) is None


async def _repair(
    transport: Transport, problems: Sequence[Finding], concurrency: int
) -> tuple[tuple[RepairResult, ...], tuple[Finding, ...]]:
    by_turn: dict[tuple[str, str], list[Finding]] = {}
    for f in problems:
        if f.repair is not None:
            by_turn.setdefault((f.conversation_id, f.turn_id), []).append(f)
    results: dict[tuple[str, str], RepairResult] = {}
    resolved: set[int] = set()

    async def fix(key: tuple[str, str]) -> None:
        todo = [f for f in by_turn[key] if await _still_broken(transport, f)]
        # A turn someone closed meanwhile is resolved without a write.
        resolved.update(id(f) for f in by_turn[key] if f not in todo)
        if not todo:
            return
        result = await apply_repairs(
            transport, [f.diagnosis() for f in todo], conversation_id=key[0], turn_id=key[1]
        )
        results[key] = result
        for f, outcome in zip(todo, result.outcomes, strict=True):
            if outcome.ok:
                resolved.add(id(f))

    await gather_bounded([functools.partial(fix, key) for key in by_turn], concurrency)
    ordered = tuple(results[k] for k in sorted(results))
    return ordered, tuple(f for f in problems if id(f) not in resolved)
