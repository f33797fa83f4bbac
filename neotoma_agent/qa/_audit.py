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
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final, Literal, TypeVar

import anyio
import attrs

from .._identity import resolve_identity
from .._keys import turn_keys, validate_conversation_id
from .._log import get_logger
from .._memory import NeotomaMemory
from ..exceptions import NotFoundError, ValidationError
from ..transport._base import EntitySnapshot, Transport
from ._actions import (
    AUDIT_REPAIR_REASON,
    AbandonTurn,
    CompleteTurn,
    LinkToConversation,
    RepairAction,
    action_json,
)
from ._diagnose import Diagnosis
from ._repair import RepairResult, apply_repairs

__all__ = [
    "AUDIT_DEFAULT_MIN_AGE",
    "AuditReport",
    "Finding",
    "FindingKind",
    "FindingSeverity",
    "audit",
]

logger = get_logger()

T = TypeVar("T")
Role = Literal["user", "assistant"]
FindingSeverity = Literal["info", "warn", "error"]

_PAGE: Final = 500
_MESSAGE_PREFIX: Final = "conversation_message:"
_RECORD_PREFIX: Final = "conversation_turn:"
_ASSISTANT_SUFFIX: Final = ":assistant"
_CLOSED: Final = frozenset({"completed", "abandoned"})


def _default_close_timeout() -> float:
    # Read from the class, not repeated here, so that the audit follows the library.
    default = attrs.fields(NeotomaMemory).close_timeout.default
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        raise TypeError("NeotomaMemory.close_timeout has no numeric default")
    return float(default)


#: how long ``NeotomaMemory`` lets a closing store run by default (``close_timeout``)
_CLOSE_TIMEOUT: Final = _default_close_timeout()
#: how long an agent may still be writing its reply: a turn writes nothing between its
#: opening store and its closing one, however long the model streams or tools run
_REPLY_MARGIN: Final = 300.0
#: the default ``min_age``: an open turn younger than this may still be running (its agent
#: writing the reply, then up to ``close_timeout`` closing it), so it is never repaired as
#: abandoned unless asked with an explicit ``min_age``
AUDIT_DEFAULT_MIN_AGE: Final[float] = _CLOSE_TIMEOUT + _REPLY_MARGIN


def skipped_reason(min_age: float) -> str:
    """Why an audit left a turn alone (as the report and ``neotoma-agent audit`` say it)."""
    return f"younger than --min-age {min_age:g}s: may still be running"


class FindingKind(enum.Enum):
    """What an audit can find wrong (or worth knowing) about a turn."""

    #: a user message with no reply whose turn was never closed (record open or missing)
    ORPHAN_TURN = "orphan_turn"
    #: a stored reply whose user message is missing
    ASSISTANT_WITHOUT_USER = "assistant_without_user"
    #: a turn record (not abandoned) with neither message stored
    RECORD_WITHOUT_MESSAGES = "record_without_messages"
    #: both messages stored, but the turn record still says open
    UNCLOSED_TURN = "unclosed_turn"
    #: a message that is not ``PART_OF`` any conversation
    MESSAGE_NOT_IN_CONVERSATION = "message_not_in_conversation"
    #: a turn closed as abandoned (informational: consistent, but the user got no full reply)
    ABANDONED_TURN = "abandoned_turn"


_KIND_ORDER: Final = {kind: i for i, kind in enumerate(FindingKind)}

# What each problem means, the risk if left, and the fix (for reports and neotoma_repair).
_EXPLAIN: Final[Mapping[FindingKind, tuple[str, str, str]]] = {
    FindingKind.ORPHAN_TURN: (
        "The store holds a question with no answer and a turn that looks still running.",
        "Recall shows an unanswered question; readers cannot tell a crash from a live turn.",
        "Record the turn as abandoned (audit --repair); no reply is invented.",
    ),
    FindingKind.ASSISTANT_WITHOUT_USER: (
        "The store holds a reply to a question it does not have.",
        "The reply cannot be read in context, and nothing can restore the lost question.",
        "Store the user message with its exact text from the harness transcript, if known.",
    ),
    FindingKind.RECORD_WITHOUT_MESSAGES: (
        "A turn record claims a turn whose messages were never stored.",
        "Audits and turn counts disagree with the messages actually stored.",
        "Record the turn as abandoned (audit --repair).",
    ),
    FindingKind.UNCLOSED_TURN: (
        "Both messages are stored, but the record says the turn is still running.",
        "Audits keep flagging the turn until its record is closed.",
        "Record the turn as completed (audit --repair).",
    ),
    FindingKind.MESSAGE_NOT_IN_CONVERSATION: (
        "A stored message does not hang off its conversation.",
        "Reading the conversation back skips this message.",
        "Add the PART_OF edge to its conversation (audit --repair).",
    ),
}


@attrs.frozen
class Finding:
    """One thing an audit found about one turn, with every id it concerns."""

    kind: FindingKind
    severity: FindingSeverity
    conversation_id: str
    turn_id: str
    message: str
    conversation_entity_id: str | None = None
    user_message_id: str | None = None
    assistant_message_id: str | None = None
    turn_record_id: str | None = None
    #: the turn record's status (``None`` when the turn has no record)
    record_status: str | None = None
    #: why an abandoned turn was abandoned (``reason`` or ``error_class`` of its record)
    reason: str | None = None
    #: the most recent write to the turn's record or messages (ISO 8601), when known
    last_activity_at: str | None = None
    #: the repair ``audit(..., repair=True)`` runs for it, if a safe one exists
    repair: RepairAction | None = None

    @property
    def problem(self) -> bool:
        """True for ``warn`` / ``error`` findings (``info`` ones are consistent turns)."""
        return self.severity != "info"

    @property
    def repaired(self) -> bool:
        """True for a turn an earlier audit closed (abandoned, ``orphan_found_by_audit``)."""
        return self.kind is FindingKind.ABANDONED_TURN and self.reason == AUDIT_REPAIR_REASON

    @property
    def entity_ids(self) -> tuple[str, ...]:
        """The ids of the turn's stored entities that the finding concerns."""
        ids = (
            self.conversation_entity_id,
            self.user_message_id,
            self.assistant_message_id,
            self.turn_record_id,
        )
        return tuple(i for i in ids if i)

    def diagnosis(self) -> Diagnosis:
        """The finding as a :class:`Diagnosis` (what :func:`apply_repairs` runs)."""
        severity: Literal["ok", "warn", "error"] = (
            "ok" if self.severity == "info" else (self.severity)
        )
        meaning, risk, resolution = _EXPLAIN.get(self.kind, (None, None, None))
        return Diagnosis(
            self.kind.value,
            severity,
            self.message,
            meaning=meaning,
            risk=risk,
            resolution=resolution,
            repair=self.repair,
        )

    def to_json(self) -> Mapping[str, Any]:
        """The finding as plain JSON."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "severity": self.severity,
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "message": self.message,
            "conversation_entity_id": self.conversation_entity_id,
            "user_message_id": self.user_message_id,
            "assistant_message_id": self.assistant_message_id,
            "turn_record_id": self.turn_record_id,
            "record_status": self.record_status,
            "reason": self.reason,
            "last_activity_at": self.last_activity_at,
        }
        out["repair"] = dict(action_json(self.repair)) if self.repair is not None else None
        return out


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
                "reason": skipped_reason(self.min_age),
                "turns": [{"conversation_id": c, "turn_id": t} for c, t in self.skipped_turns],
            },
            "partial": self.partial,
            "duration_ms": round(self.duration_ms, 3),
            "findings": [dict(f.to_json()) for f in self.findings],
            "remaining": [dict(f.to_json()) for f in self.remaining],
            "repairs": [dict(r.to_json()) for r in self.repairs],
        }


# ---------------------------------------------------------------------------- reading


@attrs.define
class _Message:
    entity_id: str
    in_conversation: bool
    conversation_entity_id: str | None
    activity: str | None


@attrs.define
class _TurnState:
    conversation_id: str
    turn_id: str
    #: ids taken from stored fields (not from a canonical name, which folds whitespace)
    exact: bool
    record: EntitySnapshot | None = None
    user: _Message | None = None
    assistant: _Message | None = None

    def message(self, role: Role) -> _Message | None:
        return self.user if role == "user" else self.assistant

    def set_message(self, role: Role, message: _Message) -> None:
        if role == "user":
            self.user = message
        else:
            self.assistant = message

    @property
    def status(self) -> str | None:
        if self.record is None:
            return None
        value = self.record.snapshot.get("status")
        return value if isinstance(value, str) else None

    @property
    def activity(self) -> str | None:
        stamps = [self.record.last_observation_at if self.record else None]
        stamps += [m.activity for m in (self.user, self.assistant) if m is not None]
        known = [s for s in stamps if s]
        return max(known, key=_timestamp) if known else None


def _norm(key: str) -> str:
    # Turns are matched on the storage form of "conversation_id:turn_id" found in canonical
    # names, which both a message's and a turn record's name carry, transformed alike
    # (whitespace runs collapsed, case kept). Only a name holding an email is stored
    # lowercased and uncollapsed, and the ":assistant" suffix can make one of two names look
    # like an email: fold those.
    return _fold(key) if "@" in key else key


def _fold(text: str) -> str:
    """An id as any canonical name may carry it: whitespace runs collapsed, case folded."""
    return " ".join(text.split()).casefold()


def _message_key(name: str | None) -> tuple[str, Role] | None:
    """(storage-form turn key, role) from a message's canonical name."""
    if not name or not name.startswith(_MESSAGE_PREFIX):
        return None
    key = name[len(_MESSAGE_PREFIX) :]
    role: Role = "user"
    if key.endswith(_ASSISTANT_SUFFIX):
        key, role = key[: -len(_ASSISTANT_SUFFIX)], "assistant"
    cid, sep, tid = key.rpartition(":")
    return (key, role) if sep and cid and tid else None


def _record_key(name: str | None) -> str | None:
    """The storage-form turn key from a turn record's canonical name."""
    if not name or not name.startswith(_RECORD_PREFIX):
        return None
    sid, sep, tid = name[len(_RECORD_PREFIX) :].rpartition("|")
    return f"{sid}:{tid}" if sep and sid and tid else None


def _parse_turn_key(turn_key: str) -> tuple[str, str, Role] | None:
    """(conversation_id, turn_id, role) from an exact ``turn_key`` field."""
    role: Role = "user"
    if turn_key.endswith(_ASSISTANT_SUFFIX):
        turn_key, role = turn_key[: -len(_ASSISTANT_SUFFIX)], "assistant"
    conversation_id, sep, turn_id = turn_key.rpartition(":")
    if not sep or not conversation_id or not turn_id:
        return None
    return conversation_id, turn_id, role


def _parse_timestamp(value: str) -> float:
    # Python 3.10's fromisoformat does not take a trailing Z.
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _timestamp(value: str) -> float:
    """Seconds since the epoch of a stored ISO 8601 timestamp (0.0 if unreadable)."""
    try:
        return _parse_timestamp(value)
    except ValueError:
        return 0.0


def _since(value: datetime | str | None) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        try:
            return _parse_timestamp(value), value
        except ValueError:
            raise ValueError(f"since must be an ISO 8601 timestamp, got {value!r}") from None
    if value.tzinfo is None:
        raise ValueError("since must be timezone-aware (store timestamps are UTC)")
    return value.timestamp(), value.isoformat()


def _conversation_entity_id(conversation_id: str) -> str:
    return resolve_identity("conversation", {"conversation_id": conversation_id}).entity_id


def _message_entity_id(conversation_id: str, turn_id: str, role: Role) -> str:
    suffix = _ASSISTANT_SUFFIX if role == "assistant" else ""
    turn_key = f"{conversation_id}:{turn_id}{suffix}"
    return resolve_identity("conversation_message", {"turn_key": turn_key}).entity_id


def _record_entity_id(conversation_id: str, turn_id: str) -> str:
    fields = {"session_id": conversation_id, "turn_id": turn_id}
    return resolve_identity("conversation_turn", fields).entity_id


async def _each(items: Iterable[T], fn: Callable[[T], Awaitable[None]], limit: int) -> None:
    """Run ``fn`` over ``items``, at most ``limit`` at a time; the first error propagates."""
    iterator = iter(items)
    failure: list[BaseException] = []

    async def worker(scope: anyio.CancelScope) -> None:
        for item in iterator:  # one shared iterator: each item is taken once
            try:
                await fn(item)
            except Exception as exc:
                # Re-raised bare after the group, not wrapped in an ExceptionGroup.
                failure.append(exc)
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        for _ in range(limit):
            tg.start_soon(worker, tg.cancel_scope)
    if failure:
        raise failure[0]


async def _scan(
    transport: Transport, entity_type: str, *, search: str | None, limit: int
) -> tuple[list[EntitySnapshot], bool]:
    """Every entity of one type (matching ``search``), paged; later pages run concurrently.

    Returns the entities and whether the scan was complete: a server may refuse offsets
    past a limit (a Neotoma server stops at 2,000), and then only what it gave is returned.
    """
    first = await transport.query_entities(
        entity_type=entity_type, search=search, limit=_PAGE, offset=0
    )
    pages: dict[int, Sequence[EntitySnapshot]] = {0: first.entities}
    step = len(first.entities)  # the server's page size (it may cap below ours)
    refused: list[int] = []

    async def page(offset: int) -> None:
        try:
            result = await transport.query_entities(
                entity_type=entity_type, search=search, limit=step, offset=offset
            )
        except ValidationError:
            refused.append(offset)
            return
        pages[offset] = result.entities

    if "next_cursor" in first.raw:
        # Keyset paging: each page costs the same, and no offset cap applies.
        result = first
        while result.next_cursor is not None:
            result = await transport.query_entities(
                entity_type=entity_type, search=search, limit=_PAGE, cursor=result.next_cursor
            )
            pages[max(pages) + step] = result.entities
    elif step and "total" in first.raw:
        await _each(range(step, first.total, step), page, limit)
    elif step:
        # No total to plan by: read on until a short page.
        while not refused and len(pages[max(pages)]) >= step:
            await page(max(pages) + step)
    seen: dict[str, EntitySnapshot] = {}
    for offset in sorted(pages):
        for entity in pages[offset]:
            if entity.entity_type == entity_type:
                seen.setdefault(entity.entity_id, entity)
    if refused:
        logger.warning(
            "audit.partial_scan",
            entity_type=entity_type,
            read=len(seen),
            total=first.total,
            refused_offset=min(refused),
        )
    return list(seen.values()), not refused


async def _snapshot(transport: Transport, entity_id: str) -> EntitySnapshot | None:
    try:
        return await transport.get_entity_snapshot(entity_id)
    except NotFoundError:
        return None


@attrs.define
class _Auditor:
    transport: Transport
    conversation_id: str | None
    thorough: bool
    limit: int
    turns: dict[str, _TurnState] = attrs.Factory(dict)
    #: message timestamps matter (``since`` / ``min_age``); else they are not read
    timed: bool = False
    #: a server refused to page through everything: some turns were not examined
    partial: bool = False

    def turn(self, key: str) -> _TurnState | None:
        """The state of the turn with this storage-form key (None: outside the scope)."""
        norm = _norm(key)
        state = self.turns.get(norm)
        if state is None:
            cid, _, tid = key.rpartition(":")
            if self.conversation_id is not None and _fold(cid) != _fold(self.conversation_id):
                return None  # a search hit on a conversation whose id contains ours
            state = self.turns[norm] = _TurnState(cid, tid, False)
        return state

    def add_record(self, record: EntitySnapshot) -> None:
        key = _record_key(record.canonical_name)
        if key is None:
            return  # not keyed by (session_id, turn_id): not a turn-protocol record
        state = self.turn(key)
        if state is None or state.record is not None:
            return
        state.record = record
        sid, tid = record.snapshot.get("session_id"), record.snapshot.get("turn_id")
        if isinstance(sid, str) and sid and isinstance(tid, str) and tid:
            state.conversation_id, state.turn_id, state.exact = sid, tid, True

    def add_message(
        self,
        entity_id: str,
        canonical_name: str | None,
        in_conversation: bool,
        conversation_entity_id: str | None,
        activity: str | None,
        turn_key: object = None,
    ) -> None:
        # Called once per message of the store: kept lean on purpose.
        found = _message_key(canonical_name)
        if found is None:
            return  # not keyed by a turn_key: not a turn-protocol message
        key, role = found
        state = self.turns.get(_norm(key)) or self.turn(key)
        if state is None:
            return
        known = state.user if role == "user" else state.assistant
        if known is None:
            message = _Message(entity_id, in_conversation, conversation_entity_id, activity)
            if role == "user":
                state.user = message
            else:
                state.assistant = message
        elif in_conversation and not known.in_conversation:
            known.in_conversation, known.conversation_entity_id = True, conversation_entity_id
        if not state.exact and isinstance(turn_key, str):
            parsed = _parse_turn_key(turn_key)
            if parsed is not None:
                state.conversation_id, state.turn_id, state.exact = parsed[0], parsed[1], True

    async def load_conversation(self, conversation_entity_id: str) -> None:
        related = await self.transport.retrieve_related_entities(
            conversation_entity_id, relationship_types=["PART_OF"], direction="inbound"
        )
        rows = {e.id: e for e in related.entities if e.entity_type == "conversation_message"}
        add = self.add_message
        for edge in related.relationships:
            if edge.target_entity_id != conversation_entity_id:
                continue
            row = rows.get(edge.source_entity_id)
            if row is None or edge.relationship_type != "PART_OF":
                continue
            updated = row.raw.get("updated_at") if self.timed else None
            add(
                row.id,
                row.canonical_name,
                True,
                conversation_entity_id,
                updated if isinstance(updated, str) else None,
            )

    async def load_all_messages(self, search: str | None) -> None:
        messages, complete = await _scan(
            self.transport, "conversation_message", search=search, limit=self.limit
        )
        self.partial |= not complete
        for message in messages:
            self.add_message(
                message.entity_id,
                message.canonical_name,
                False,
                None,
                message.last_observation_at,
                message.snapshot.get("turn_key"),
            )

    async def verify(self, state: _TurnState) -> None:
        """Settle what the bulk reads left open for one turn (a few reads, only if needed)."""
        if state.user is not None and state.assistant is not None:
            return
        present = state.user or state.assistant
        if not state.exact and present is not None:
            # Repairs and reports need the exact ids, which only the stored turn_key has.
            snap = await _snapshot(self.transport, present.entity_id)
            if snap is not None and present.activity is None:
                present.activity = snap.last_observation_at
            turn_key = snap.snapshot.get("turn_key") if snap is not None else None
            parsed = _parse_turn_key(turn_key) if isinstance(turn_key, str) else None
            if parsed is not None:
                state.conversation_id, state.turn_id, state.exact = parsed[0], parsed[1], True
        cid, tid = state.conversation_id, state.turn_id
        if state.record is None and self.conversation_id is not None:
            # A scoped audit found records by search; look this one up by its id too.
            state.record = await _snapshot(self.transport, _record_entity_id(cid, tid))
        for role in ("user", "assistant"):
            if state.message(role) is not None:
                continue
            snap = await _snapshot(self.transport, _message_entity_id(cid, tid, role))
            if snap is not None:
                # It exists, but no conversation we read has it as PART_OF.
                state.set_message(
                    role, _Message(snap.entity_id, False, None, snap.last_observation_at)
                )


def _repairable(action: Callable[[], RepairAction]) -> RepairAction | None:
    try:
        made = action()
        turn_keys(made.conversation_id, made.turn_id)
    except (ValueError, TypeError):
        return None  # ids another writer chose that our keys cannot carry
    return made


def _classify(
    state: _TurnState, conversation_entity_id: str | None, loaded: Mapping[str, object]
) -> list[Finding]:
    cid, tid = state.conversation_id, state.turn_id
    user, assistant, status = state.user, state.assistant, state.status
    exact = state.exact

    def finding(
        kind: FindingKind,
        severity: FindingSeverity,
        message: str,
        repair: Callable[[], RepairAction] | None = None,
        reason: str | None = None,
    ) -> Finding:
        conv = conversation_entity_id
        if conv is None and (derived := _conversation_entity_id(cid)) in loaded:
            conv = derived
        return Finding(
            kind,
            severity,
            cid,
            tid,
            message,
            conversation_entity_id=conv,
            user_message_id=user.entity_id if user else None,
            assistant_message_id=assistant.entity_id if assistant else None,
            turn_record_id=state.record.entity_id if state.record else None,
            record_status=status,
            reason=reason,
            last_activity_at=state.activity,
            repair=_repairable(repair) if repair is not None and exact else None,
        )

    out: list[Finding] = []
    for role, msg in (("user", user), ("assistant", assistant)):
        if msg is not None and not msg.in_conversation:
            role_: Role = "user" if role == "user" else "assistant"
            out.append(
                finding(
                    FindingKind.MESSAGE_NOT_IN_CONVERSATION,
                    "error",
                    f"The {role} message of turn {tid} is not PART_OF any conversation.",
                    functools.partial(LinkToConversation, cid, tid, msg.entity_id, role_),
                )
            )
    record = state.record
    abandoned_reason = None
    if record is not None:
        why = record.snapshot.get("reason") or record.snapshot.get("error_class")
        abandoned_reason = why if isinstance(why, str) else None
    closed_as = f"closed as abandoned ({abandoned_reason or 'no reason given'})"
    if assistant is not None and user is None:
        out.append(
            finding(
                FindingKind.ASSISTANT_WITHOUT_USER,
                "error",
                f"The reply of turn {tid} is stored but its user message is not.",
            )
        )
    elif user is not None and assistant is None:
        if status == "abandoned":
            out.append(
                finding(
                    FindingKind.ABANDONED_TURN,
                    "info",
                    f"Turn {tid} was {closed_as}; no reply is stored.",
                    reason=abandoned_reason,
                )
            )
        else:
            out.append(
                finding(
                    FindingKind.ORPHAN_TURN,
                    "error",
                    f"The user message of turn {tid} is stored but the turn was never "
                    f"closed (turn record: {status or 'missing'}) and no reply is stored.",
                    functools.partial(AbandonTurn, cid, tid, AUDIT_REPAIR_REASON),
                )
            )
    elif user is not None and assistant is not None:
        if status == "abandoned":
            out.append(
                finding(
                    FindingKind.ABANDONED_TURN,
                    "info",
                    f"Turn {tid} was {closed_as}; the partial reply the user saw is stored.",
                    reason=abandoned_reason,
                )
            )
        elif record is not None and status not in _CLOSED:
            out.append(
                finding(
                    FindingKind.UNCLOSED_TURN,
                    "warn",
                    f"Both messages of turn {tid} are stored but its record says "
                    f"{status or 'nothing'}.",
                    functools.partial(CompleteTurn, cid, tid),
                )
            )
    elif status == "abandoned":
        out.append(
            finding(
                FindingKind.ABANDONED_TURN,
                "info",
                f"Turn {tid} was {closed_as}; neither message is stored.",
                reason=abandoned_reason,
            )
        )
    elif record is not None:
        out.append(
            finding(
                FindingKind.RECORD_WITHOUT_MESSAGES,
                "error",
                f"The record of turn {tid} says {status or 'nothing'} but neither message "
                "is stored.",
                functools.partial(AbandonTurn, cid, tid, AUDIT_REPAIR_REASON),
            )
        )
    return out


def _sort_key(f: Finding) -> tuple[str, str, int, str]:
    return (f.conversation_id, f.turn_id, _KIND_ORDER[f.kind], f.message)


# ---------------------------------------------------------------------------- entry point


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
    closed although both messages are stored, messages not ``PART_OF`` any conversation, and
    (as ``info``) abandoned turns. Findings come sorted by conversation, turn and kind.

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
    auditor = _Auditor(
        transport, scope, thorough, concurrency, timed=since_at is not None or min_age > 0
    )

    # conversation entity id -> its snapshot (None: known only by its derived id)
    conversations: dict[str, EntitySnapshot | None] = {}
    if scope is None:
        await _read_all(auditor, conversations, since_at, concurrency)
    else:
        await _read_scoped(auditor, conversations, scope, concurrency)

    def included(state: _TurnState) -> bool:
        if since_at is None:
            return True
        activity = state.activity
        return activity is None or _timestamp(activity) >= since_at

    selected = [s for s in auditor.turns.values() if included(s)]
    incomplete = [s for s in selected if s.user is None or s.assistant is None]
    await _each(incomplete, auditor.verify, concurrency)

    now = time.time()
    findings: list[Finding] = []
    skipped: list[tuple[str, str]] = []
    for state in selected:
        user, assistant = state.user, state.assistant
        if (
            user is not None
            and assistant is not None
            and user.in_conversation
            and assistant.in_conversation
            and (state.record is None or state.status == "completed")
        ):
            continue  # the common case: both halves, in the conversation, closed
        conv_entity = next(
            (
                m.conversation_entity_id
                for m in (state.user, state.assistant)
                if m is not None and m.conversation_entity_id
            ),
            None,
        )
        turn_findings = _classify(state, conv_entity, conversations)
        if min_age > 0 and any(f.kind is not FindingKind.ABANDONED_TURN for f in turn_findings):
            activity = state.activity
            if activity is not None and _timestamp(activity) > now - min_age:
                skipped.append((state.conversation_id, state.turn_id))
                continue
        findings.extend(turn_findings)
    findings.sort(key=_sort_key)

    repairs: tuple[RepairResult, ...] = ()
    remaining = tuple(f for f in findings if f.problem)
    if repair and remaining:
        repairs, remaining = await _repair(transport, remaining, concurrency)

    report = AuditReport(
        findings=tuple(findings),
        remaining=remaining,
        repairs=repairs,
        conversations=len(conversations),
        turns=len(selected),
        messages=sum((s.user is not None) + (s.assistant is not None) for s in selected),
        skipped_recent=len(skipped),
        skipped_turns=tuple(sorted(skipped)),
        min_age=min_age,
        partial=auditor.partial,
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


async def _read_all(
    auditor: _Auditor,
    conversations: dict[str, EntitySnapshot | None],
    since_at: float | None,
    concurrency: int,
) -> None:
    """Scan records, and conversations then their messages, concurrently."""
    transport = auditor.transport
    records: list[EntitySnapshot] = []

    async def scan_records() -> None:
        found, complete = await _scan(transport, "conversation_turn", search=None, limit=2)
        records.extend(found)
        auditor.partial |= not complete

    async def conversations_and_messages() -> None:
        found, complete = await _scan(transport, "conversation", search=None, limit=2)
        auditor.partial |= not complete
        for conv in found:
            if since_at is None or _timestamp(conv.last_observation_at or "") >= since_at:
                conversations[conv.entity_id] = conv
        await _each(list(conversations), auditor.load_conversation, concurrency)

    async def scan_messages() -> None:
        await auditor.load_all_messages(None)

    jobs = [scan_records, conversations_and_messages]
    if auditor.thorough:
        jobs.append(scan_messages)
    await _each(jobs, lambda job: job(), len(jobs))
    for record in records:
        auditor.add_record(record)
    if since_at is not None:
        # A turn abandoned with no reply writes only its record, not its conversation:
        # read the conversations of recent records too.
        extra = {
            _conversation_entity_id(state.conversation_id)
            for state in auditor.turns.values()
            if state.record is not None
            and _timestamp(state.record.last_observation_at or "") >= since_at
        }
        extra -= conversations.keys()
        conversations.update(dict.fromkeys(extra))
        await _each(sorted(extra), auditor.load_conversation, concurrency)


async def _read_scoped(
    auditor: _Auditor,
    conversations: dict[str, EntitySnapshot | None],
    scope: str,
    concurrency: int,
) -> None:
    """One conversation: its entity by id, its records by name search, its messages."""
    transport = auditor.transport
    conversation_entity_id = _conversation_entity_id(scope)
    records: list[EntitySnapshot] = []

    async def conversation_and_messages() -> None:
        snapshot = await _snapshot(transport, conversation_entity_id)
        if snapshot is not None:
            conversations[conversation_entity_id] = snapshot
            await auditor.load_conversation(conversation_entity_id)

    async def scan_records() -> None:
        # The search also finds conversations whose id contains this one: add_record
        # filters them out.
        found, complete = await _scan(transport, "conversation_turn", search=scope, limit=2)
        records.extend(found)
        auditor.partial |= not complete

    async def scan_messages() -> None:
        await auditor.load_all_messages(scope)

    jobs = [conversation_and_messages, scan_records]
    if auditor.thorough:
        jobs.append(scan_messages)
    await _each(jobs, lambda job: job(), len(jobs))
    for record in records:
        auditor.add_record(record)


async def _still_broken(transport: Transport, finding: Finding) -> bool:
    """Re-read a turn just before repairing it: a live turn may have closed meanwhile."""
    cid, tid = finding.conversation_id, finding.turn_id
    if finding.kind is FindingKind.MESSAGE_NOT_IN_CONVERSATION:
        return True  # adding an edge that appeared meanwhile is harmless
    record = await _snapshot(transport, finding.turn_record_id or _record_entity_id(cid, tid))
    status = record.snapshot.get("status") if record is not None else None
    if status != finding.record_status:
        return False
    if finding.kind is FindingKind.UNCLOSED_TURN:
        return True
    # An orphan stays one only while no reply exists.
    return await _snapshot(transport, _message_entity_id(cid, tid, "assistant")) is None


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

    await _each(list(by_turn), fix, concurrency)
    ordered = tuple(results[k] for k in sorted(results))
    return ordered, tuple(f for f in problems if id(f) not in resolved)
