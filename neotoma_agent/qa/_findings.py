"""What an audit can find about a turn (:class:`FindingKind`, :class:`Finding`), and
:func:`classify`, which judges one turn's :class:`~._scan.TurnState` into findings."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Container, Mapping
from typing import Any, Final

import attrs

from .._keys import TurnRole, conversation_entity_id, turn_keys
from .._turn_record import ending_of
from ._actions import (
    AUDIT_REPAIR_REASON,
    AbandonTurn,
    CompleteTurn,
    LinkToConversation,
    RepairAction,
    action_json,
)
from ._diagnose import Diagnosis
from ._scan import TurnState
from ._severity import Severity, as_severity

__all__ = ["Finding", "FindingKind", "classify", "sort_key"]

_CLOSED: Final = frozenset({"completed", "abandoned"})


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
    #: a stored tool call (``tool_invocation``) whose turn record is missing
    TOOL_CALL_WITHOUT_TURN = "tool_call_without_turn"


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
    FindingKind.TOOL_CALL_WITHOUT_TURN: (
        "The store holds tool calls of a turn it has no record of.",
        "The calls show in no turn's history; what the turn did cannot be read in context.",
        "None automatic: the turn's messages and record are unknown (another writer's?).",
    ),
}


@attrs.frozen
class Finding:
    """One thing an audit found about one turn, with every id it concerns."""

    kind: FindingKind
    #: ``info`` for a consistent turn worth knowing about (abandoned), else a problem
    severity: Severity = attrs.field(converter=as_severity)
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
    #: the ``tool_invocation`` entities the finding concerns (``tool_call_without_turn``)
    tool_invocation_ids: tuple[str, ...] = ()

    @property
    def problem(self) -> bool:
        """True for ``warn`` / ``error`` findings (``info`` ones are consistent turns)."""
        return self.severity is not Severity.INFO

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
            *self.tool_invocation_ids,
        )
        return tuple(i for i in ids if i)

    def diagnosis(self) -> Diagnosis:
        """The finding as a :class:`Diagnosis` (what :func:`apply_repairs` runs)."""
        meaning, risk, resolution = _EXPLAIN.get(self.kind, (None, None, None))
        return Diagnosis(
            self.kind.value,
            self.severity,
            self.message,
            meaning=meaning,
            risk=risk,
            resolution=resolution,
            repair=self.repair,
        )

    def to_json(self) -> Mapping[str, Any]:
        """The finding as plain JSON."""
        out = attrs.asdict(self, recurse=False)  # every field by name, in order
        out["kind"] = self.kind.value
        out["severity"] = str(self.severity)
        out["repair"] = dict(action_json(self.repair)) if self.repair is not None else None
        return out


def _repairable(action: Callable[[], RepairAction]) -> RepairAction | None:
    try:
        made = action()
        turn_keys(made.conversation_id, made.turn_id)
    except (ValueError, TypeError):
        return None  # ids another writer chose that our keys cannot carry
    return made


def classify(
    state: TurnState,
    conv_entity_id: str | None,
    loaded: Container[str],
    tenant: str | None = None,
) -> list[Finding]:
    cid, tid = state.conversation_id, state.turn_id
    user, assistant, status = state.user, state.assistant, state.status
    exact = state.exact

    def finding(
        kind: FindingKind,
        severity: Severity,
        message: str,
        repair: Callable[[], RepairAction] | None = None,
        reason: str | None = None,
    ) -> Finding:
        conv = conv_entity_id
        if conv is None and (derived := conversation_entity_id(cid, tenant)) in loaded:
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
            role_: TurnRole = "user" if role == "user" else "assistant"
            out.append(
                finding(
                    FindingKind.MESSAGE_NOT_IN_CONVERSATION,
                    Severity.ERROR,
                    f"The {role} message of turn {tid} is not PART_OF any conversation.",
                    functools.partial(LinkToConversation, cid, tid, msg.entity_id, role_),
                )
            )
    record = state.record
    ending = state.ending or (ending_of(record.snapshot) if record is not None else None)
    abandoned_reason = ending.why if ending is not None else None
    closed_as = f"closed as abandoned ({abandoned_reason or 'no reason given'})"
    if assistant is not None and user is None:
        out.append(
            finding(
                FindingKind.ASSISTANT_WITHOUT_USER,
                Severity.ERROR,
                f"The reply of turn {tid} is stored but its user message is not.",
            )
        )
    elif user is not None and assistant is None:
        if status == "abandoned":
            out.append(
                finding(
                    FindingKind.ABANDONED_TURN,
                    Severity.INFO,
                    f"Turn {tid} was {closed_as}; no reply is stored.",
                    reason=abandoned_reason,
                )
            )
        else:
            out.append(
                finding(
                    FindingKind.ORPHAN_TURN,
                    Severity.ERROR,
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
                    Severity.INFO,
                    f"Turn {tid} was {closed_as}; the partial reply the user saw is stored.",
                    reason=abandoned_reason,
                )
            )
        elif record is not None and status not in _CLOSED:
            out.append(
                finding(
                    FindingKind.UNCLOSED_TURN,
                    Severity.WARN,
                    f"Both messages of turn {tid} are stored but its record says "
                    f"{status or 'nothing'}.",
                    functools.partial(CompleteTurn, cid, tid),
                )
            )
    elif status == "abandoned":
        out.append(
            finding(
                FindingKind.ABANDONED_TURN,
                Severity.INFO,
                f"Turn {tid} was {closed_as}; neither message is stored.",
                reason=abandoned_reason,
            )
        )
    elif record is not None:
        out.append(
            finding(
                FindingKind.RECORD_WITHOUT_MESSAGES,
                Severity.ERROR,
                f"The record of turn {tid} says {status or 'nothing'} but neither message "
                "is stored.",
                functools.partial(AbandonTurn, cid, tid, AUDIT_REPAIR_REASON),
            )
        )
    return out


def sort_key(f: Finding) -> tuple[str, str, int, str]:
    return (f.conversation_id, f.turn_id, _KIND_ORDER[f.kind], f.message)
