"""Turn ids, turn keys and idempotency keys: the strings that decide what merges.

A Neotoma server derives a message's entity id from its ``turn_key`` and replays a store whose
idempotency key it has seen, so these strings *are* the turn's identity. Two different turns
that produce the same key are silently merged into one; one turn that produces two keys is
stored twice. Everything here is a pure function and every id is validated before any I/O.

Key shapes (design §4)::

    turn_key         {conversation_id}:{turn_id}              user message
                     {conversation_id}:{turn_id}:assistant    assistant message
    idempotency      conversation-{cid}-{tid}-user-turn       enter store
                     conversation-{cid}-{tid}-assistant-turn  closing store (completed)
                     conversation-{cid}-{tid}-abandoned       closing store (abandoned)
                     conversation-{cid}-{tid}-recorded-turn   record_turn (one store)

A ``revision`` of 2 or more appends ``-r{revision}`` to the idempotency keys (never to the
turn keys), so a regenerated reply lands on the same message entity as a new observation.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Final, Literal

import attrs

__all__ = [
    "ENTITY_ID_RE",
    "Phase",
    "TurnKeys",
    "new_turn_id",
    "turn_keys",
    "validate_conversation_id",
    "validate_entity_id",
    "validate_revision",
    "validate_turn_id",
]

#: A Neotoma entity id; a store refuses a relationship naming anything else.
ENTITY_ID_RE: Final[re.Pattern[str]] = re.compile(r"ent_[0-9a-f]{24}")

#: The turn id reserved by the assistant message's key.
_RESERVED_TURN_ID: Final = "assistant"

Phase = Literal["user", "assistant", "abandoned", "recorded"]

_PHASE_SUFFIX: Final[dict[Phase, str]] = {
    "user": "user-turn",
    "assistant": "assistant-turn",
    "abandoned": "abandoned",
    "recorded": "recorded-turn",
}


def _validate_id(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{kind} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{kind} must not be empty")
    # The store trims names before hashing them, so " a" and "a" would be one entity.
    if value != value.strip():
        raise ValueError(f"{kind} must not start or end with whitespace")
    if any(ch in value for ch in "\r\n\t\x00"):
        raise ValueError(f"{kind} must not contain control characters")
    return value


def validate_conversation_id(conversation_id: object) -> str:
    """Return ``conversation_id`` or raise ``ValueError`` / ``TypeError`` if it is unusable."""
    return _validate_id("conversation_id", conversation_id)


def validate_turn_id(turn_id: object) -> str:
    """Return ``turn_id`` or raise if two different turns could end up sharing its keys.

    ``:`` is refused because turn keys join with it (``c:a:b`` would be both turn ``a:b`` of
    ``c`` and turn ``b`` of ``c:a``), ``assistant`` because ``{cid}:assistant`` is another
    turn's assistant suffix, and ``|`` because the turn record's identity joins
    ``session_id|turn_id``.
    """
    value = _validate_id("turn_id", turn_id)
    if ":" in value:
        raise ValueError("turn_id must not contain ':' (turn keys are joined with ':')")
    if "|" in value:
        raise ValueError("turn_id must not contain '|' (turn records are keyed session|turn)")
    if value.lower() == _RESERVED_TURN_ID:
        raise ValueError("turn_id must not be 'assistant' (reserved by the reply's turn key)")
    return value


def validate_revision(revision: object) -> int | None:
    """Return ``revision`` (``None`` or an int >= 1) or raise ``ValueError``."""
    if revision is None:
        return None
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise TypeError(f"revision must be an int, not {type(revision).__name__}")
    if revision < 1:
        raise ValueError("revision must be >= 1")
    return revision


def validate_entity_id(entity_id: object) -> str:
    """Return ``entity_id`` if it is a Neotoma entity id (``ent_`` + 24 hex), else raise.

    A malformed id in one relationship makes the server refuse the whole store, which would
    lose the message it carries, so ids are checked when they are handed to us.
    """
    if not isinstance(entity_id, str) or not ENTITY_ID_RE.fullmatch(entity_id):
        raise ValueError(f"not a Neotoma entity id (ent_ + 24 hex digits): {entity_id!r}")
    return entity_id


@attrs.frozen
class TurnKeys:
    """Every key of one turn, derived from the conversation id, turn id and revision."""

    conversation_id: str
    turn_id: str
    revision: int | None = None

    @property
    def user_turn_key(self) -> str:
        """The user message's ``turn_key``."""
        return f"{self.conversation_id}:{self.turn_id}"

    @property
    def assistant_turn_key(self) -> str:
        """The assistant message's ``turn_key``."""
        return f"{self.conversation_id}:{self.turn_id}:assistant"

    def idempotency_key(self, phase: Phase) -> str:
        """The idempotency key of one store phase of this turn."""
        key = f"conversation-{self.conversation_id}-{self.turn_id}-{_PHASE_SUFFIX[phase]}"
        if self.revision is not None and self.revision > 1:
            key = f"{key}-r{self.revision}"
        return key


def turn_keys(conversation_id: str, turn_id: str, revision: int | None = None) -> TurnKeys:
    """Validate the ids and return the turn's keys (``ValueError`` before any I/O)."""
    return TurnKeys(
        validate_conversation_id(conversation_id),
        validate_turn_id(turn_id),
        validate_revision(revision),
    )


_id_lock = threading.Lock()
_last_id_value = 0


def new_turn_id() -> str:
    """A fresh, time-ordered, unique turn id (UUIDv7 layout, lowercase hex with hyphens).

    48 bits of Unix milliseconds then 74 random bits, so ids sort by creation time across
    processes and restarts; within one process they strictly increase even inside one
    millisecond. A per-process counter would restart at 1 and merge a restarted agent's
    turns into its earlier ones.
    """
    global _last_id_value
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") & ((1 << 74) - 1)
    value = (ms << 74) | rand
    with _id_lock:
        if value <= _last_id_value:
            value = _last_id_value + 1
        _last_id_value = value
    rand_a = (value >> 62) & 0xFFF
    rand_b = value & ((1 << 62) - 1)
    ts = value >> 74
    as_int = (ts << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{as_int:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
