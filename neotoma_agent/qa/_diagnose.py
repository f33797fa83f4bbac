"""``diagnose_turn``: check one turn against the protocol and say what to do about each gap.

The input is a typed observation of what happened in one turn (which messages were stored,
whether a reply was shown, which files were mentioned, whether other tools ran before the
user store, where the turn record stands). The output is a checklist: one
:class:`Diagnosis` per check, ``ok`` ones included so a report can show the whole list, each
problem with what it means now, the risk if left, the recommended resolution and, when a
safe one exists, a suggested :data:`~neotoma_agent.qa.RepairAction`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..reads import validate_conversation_id, validate_turn_id
from ._actions import (
    AbandonTurn,
    RepairAction,
    StoreAssistantMessage,
    StoreAttachment,
    StoreUserMessage,
    action_json,
)
from ._severity import Severity, as_severity

if TYPE_CHECKING:
    from .. import Turn, TurnResult

__all__ = [
    "AttachmentObservation",
    "Diagnosis",
    "MessageObservation",
    "TurnObservation",
    "diagnose_turn",
]


@attrs.frozen
class MessageObservation:
    """One message of the turn: was it stored, and (if known) its exact text."""

    stored: bool
    #: the exact text; ``None`` when it is not known (then no repair can store it)
    content: str | None = attrs.field(default=None, repr=False)


@attrs.frozen
class AttachmentObservation:
    """A file the turn mentioned, and whether it was stored."""

    file_path: str
    stored: bool


def _attachments(value: Iterable[AttachmentObservation]) -> tuple[AttachmentObservation, ...]:
    return tuple(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _conversation_id(_: Any, __: Any, value: str) -> None:
    validate_conversation_id(value)


def _turn_id(_: Any, __: Any, value: str) -> None:
    validate_turn_id(value)


@attrs.frozen
class TurnObservation:
    """What was observed about one turn; every field but the ids is optional.

    ``turn_status`` is the turn record's stored status when known (``open``,
    ``completed``, ``abandoned``). ``store_first_satisfied`` is ``False`` when non-Neotoma
    ``tools_invoked`` ran before the user store.
    """

    conversation_id: str = attrs.field(validator=_conversation_id)
    turn_id: str = attrs.field(validator=_turn_id)
    user_message: MessageObservation | None = None
    assistant_message: MessageObservation | None = None
    #: the user saw a reply (even an empty one) or part of one
    assistant_reply_produced: bool = False
    attachments: tuple[AttachmentObservation, ...] = attrs.field(default=(), converter=_attachments)
    tools_invoked: tuple[str, ...] = attrs.field(default=(), converter=_names)
    store_first_satisfied: bool | None = None
    turn_status: str | None = None
    #: the class of the error that ended the turn, if one did
    error_class: str | None = None
    #: lookups that failed or timed out during bounded retrieval
    retrieval_failures: int = 0

    @classmethod
    def from_result(
        cls, result: TurnResult, *, reply: str | None = None, user_message: str | None = None
    ) -> TurnObservation:
        """The observation of a finished turn (``t.result``).

        ``reply`` / ``user_message`` are the exact texts, if the caller still has them: a
        result keeps only ids and lengths, and a repair never invents text.
        """
        from .. import TurnState

        user = MessageObservation(result.user_message_id is not None, user_message)
        status = result.status
        if status is TurnState.COMPLETED:
            produced, stored = True, True
        elif status is TurnState.ABANDONED:
            produced = result.reply_chars > 0
            stored = result.assistant_message_id is not None
        else:
            # The closing store failed. After a normal body the user saw a reply (an empty
            # one is a reply too); after a failed body only a partial reply counts.
            produced = result.error_class is None or result.reply_chars > 0
            stored = False
        return cls(
            conversation_id=result.conversation_id,
            turn_id=result.turn_id,
            user_message=user,
            assistant_message=MessageObservation(stored, reply) if produced else None,
            assistant_reply_produced=produced,
            turn_status=result.stored_status or ("open" if status is TurnState.FAILED else None),
            error_class=result.error_class,
            retrieval_failures=result.retrieval.failures + result.retrieval.timeouts,
        )


@attrs.frozen
class Diagnosis:
    """One check of a turn: passed (``info``), or a problem (``warn``, ``error``) with its
    meaning, risk, fix and repair."""

    id: str
    #: ``info`` for a passed check (a string is taken as its :class:`Severity`)
    severity: Severity = attrs.field(converter=as_severity)
    message: str
    #: what this means for the turn's stored record right now
    meaning: str | None = None
    #: what stays wrong if nobody acts
    risk: str | None = None
    #: the recommended next step, phrased for the user
    resolution: str | None = None
    #: a safe automatic repair, if one exists (see :func:`~neotoma_agent.qa.apply_repairs`)
    repair: RepairAction | None = None

    @property
    def ok(self) -> bool:
        """True for a passed check (severity ``info``)."""
        return self.severity is Severity.INFO

    def to_json(self) -> Mapping[str, Any]:
        """The diagnosis as plain JSON."""
        out: dict[str, Any] = {
            "id": self.id,
            "severity": str(self.severity),
            "message": self.message,
        }
        for name in ("meaning", "risk", "resolution"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.repair is not None:
            out["repair"] = dict(action_json(self.repair))
        return out


def _ok(check_id: str, message: str) -> Diagnosis:
    return Diagnosis(check_id, Severity.INFO, message)


def diagnose_turn(observation: TurnObservation | TurnResult | Turn) -> list[Diagnosis]:
    """Check one turn; return every check (passed ones, ``info``, included), problems last.

    Accepts a :class:`TurnObservation`, or a finished turn (``t`` or ``t.result``), which is
    observed with :meth:`TurnObservation.from_result`.
    """
    obs = _as_observation(observation)
    cid, tid = obs.conversation_id, obs.turn_id
    out: list[Diagnosis] = []

    user = obs.user_message
    if user is not None:
        if user.stored:
            out.append(_ok("user-message-stored", "User message stored."))
        else:
            out.append(
                Diagnosis(
                    "user-message-missing",
                    Severity.ERROR,
                    "The user message of this turn was not stored.",
                    meaning="The stored conversation is missing what the user said in this turn.",
                    risk="Recall and audits of this conversation start from an incomplete "
                    "record, and the reply (if stored) answers a question nobody can read.",
                    resolution="Store the user message now with its exact text."
                    if user.content is not None
                    else "Store the user message with its exact text from the harness "
                    "transcript; it is not known here.",
                    repair=StoreUserMessage(cid, tid, user.content)
                    if user.content is not None
                    else None,
                )
            )

    assistant = obs.assistant_message
    reply_missing = obs.assistant_reply_produced and not (assistant and assistant.stored)
    if obs.assistant_reply_produced:
        if not reply_missing:
            out.append(_ok("assistant-message-stored", "Assistant reply stored."))
        else:
            content = assistant.content if assistant else None
            repair: RepairAction
            if content is not None:
                repair = StoreAssistantMessage(cid, tid, content)
                resolution = "Store the reply now with its exact text and mark the turn completed."
            else:
                repair = AbandonTurn(cid, tid, "assistant_reply_lost")
                resolution = (
                    "Store the reply with its exact text (memory.close_turn) if you still have "
                    "it; otherwise record the turn as abandoned so it does not stay open."
                )
            out.append(
                Diagnosis(
                    "assistant-message-missing",
                    Severity.ERROR,
                    "A reply was shown to the user but the assistant message was not stored.",
                    meaning="The stored conversation stops at the user's message: the turn "
                    "is half-stored, against the both-halves-or-neither rule.",
                    risk="Later recall shows an unanswered question, and the next turn may "
                    "repeat or contradict the reply the user already saw.",
                    resolution=resolution,
                    repair=repair,
                )
            )

    for attachment in obs.attachments:
        name = attachment.file_path
        if attachment.stored:
            out.append(_ok(f"attachment-stored:{name}", f"Attachment stored: {name}"))
            continue
        out.append(
            Diagnosis(
                f"attachment-missing:{name}",
                Severity.ERROR,
                f"An attachment was referenced but not stored: {name}",
                meaning="The turn refers to a file that cannot be found again from the store.",
                risk="Facts taken from the file lose their source; nobody can later check "
                "them against the original.",
                resolution="Record the file (name, size, SHA-256) and link it to the user "
                "message; upload its bytes with a client that stores files.",
                repair=StoreAttachment(cid, tid, name),
            )
        )

    if obs.tools_invoked and obs.store_first_satisfied is False:
        out.append(
            Diagnosis(
                "store-first-violation",
                Severity.WARN,
                "Other tools ran before the user message was stored.",
                meaning="Work started from a turn that was not yet durable: a crash in "
                "those tools would have lost the user's message.",
                risk="If this keeps happening, turns go missing exactly when something "
                "fails, which is when they matter most.",
                resolution="Store the user message first (enter the turn) and only then "
                "call other tools.",
            )
        )

    if obs.turn_status == "abandoned":
        because = f" after {obs.error_class}" if obs.error_class else ""
        partial = assistant is not None and assistant.stored
        half = "a partial reply was stored" if partial else "no reply was stored"
        out.append(
            Diagnosis(
                "turn-abandoned",
                Severity.WARN,
                f"The turn was abandoned{because}; {half}.",
                meaning="The turn is closed honestly: the record says why it has no "
                "complete reply.",
                risk="The store is consistent, but the user may still be waiting for an answer.",
                resolution="Retry the turn if the user still needs an answer.",
            )
        )
    elif obs.turn_status == "open" and not obs.assistant_reply_produced:
        out.append(
            Diagnosis(
                "turn-left-open",
                Severity.ERROR,
                "The turn record still says open, but the turn is over.",
                meaning="The store holds a user message whose turn was never closed: an "
                "orphan, as a crash leaves behind.",
                risk="Audits keep flagging the turn, and readers cannot tell a turn still "
                "running from one that died.",
                resolution="Record the turn as abandoned.",
                repair=AbandonTurn(cid, tid, "turn_left_open"),
            )
        )

    if obs.retrieval_failures > 0:
        n = obs.retrieval_failures
        out.append(
            Diagnosis(
                "retrieval-degraded",
                Severity.WARN,
                f"{n} lookup{'s' if n != 1 else ''} failed or timed out during retrieval.",
                meaning="The reply was grounded on fewer stored entities than the user named.",
                risk="The agent may have re-created or contradicted facts already stored.",
                resolution="Check the store's health and latency; raise retrieval_timeout "
                "if lookups are slow.",
            )
        )
    return out


def _as_observation(value: TurnObservation | TurnResult | Turn) -> TurnObservation:
    if isinstance(value, TurnObservation):
        return value
    from .. import Turn, TurnResult

    if isinstance(value, Turn):
        return TurnObservation.from_result(
            value.result, reply=value.reply, user_message=value.user_message
        )
    if isinstance(value, TurnResult):
        return TurnObservation.from_result(value)
    raise TypeError(f"cannot diagnose a {type(value).__name__}")


def problems(diagnoses: Sequence[Diagnosis]) -> list[Diagnosis]:
    """The diagnoses that are problems (not ``info``)."""
    return [d for d in diagnoses if not d.ok]
