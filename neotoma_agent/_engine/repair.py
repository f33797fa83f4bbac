"""The records a repair writes for a turn: the turn protocol's own, under its own keys.

The audit (:mod:`neotoma_agent.qa`) decides what a damaged turn lacks; what each fix
stores is decided here, beside the builders the turn engine stores a turn with, so that a
repaired turn is stored exactly as the engine would have stored it. Every payload's
idempotency key is the protocol's key for the phase it stands in for, plus a ``-repair``
suffix: one grep finds every write of a turn, a repair never collides with (or is refused
as) the phase itself, and running a repair twice replays one store and writes nothing new.

Pure: no I/O (the audit reads an attachment's file and passes its fields in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .._records.keys import TurnKeys, turn_keys
from .._records.payloads import (
    NO_SETTINGS,
    StorePayload,
    closing_payload,
    conversation_entity,
    message_entity,
    turn_record,
)

__all__ = [
    "StorePayload",
    "TurnKeys",
    "repair_assistant_message",
    "repair_attachment",
    "repair_close",
    "repair_link",
    "repair_user_message",
    "turn_keys",
]


def _repair_key(base: str, suffix: str) -> str:
    return f"{base}-repair{suffix}"


def repair_user_message(keys: TurnKeys, content: str) -> StorePayload:
    """Store a turn's missing user message (its exact text), part of its conversation."""
    return StorePayload(
        entities=(
            conversation_entity(keys.conversation_id),
            message_entity("user", content, keys.user_turn_key),
        ),
        relationships=({"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},),
        idempotency_key=_repair_key(keys.idempotency_key("user"), ""),
        conversation_index=0,
        user_index=1,
        turn_record_index=0,
    )


def repair_assistant_message(keys: TurnKeys, content: str) -> StorePayload:
    """Store a turn's missing reply (its exact text) as the turn's closing store does."""
    payload = closing_payload(
        # No settings: a repair does not know the platform or title, and a store that
        # omits them leaves the stored values untouched.
        NO_SETTINGS,
        keys,
        content,
        conversation_entity_id=None,
        user_message_id=None,
    )
    return payload._replace(idempotency_key=_repair_key(payload.idempotency_key, ""))


def repair_close(
    keys: TurnKeys, status: Literal["abandoned", "completed"], reason: str
) -> StorePayload:
    """Record the turn ``status`` with ``reason`` (the turn record's ``repair_reason``)."""
    record = turn_record(keys, status, repair_reason=reason)
    phase = keys.idempotency_key("abandoned" if status == "abandoned" else "assistant")
    return StorePayload(
        entities=(record,),
        relationships=(),
        idempotency_key=_repair_key(phase, f"-{reason}"),
        turn_record_index=0,
    )


def repair_link(
    keys: TurnKeys, role: Literal["user", "assistant"], message_id: str
) -> StorePayload:
    """Link the turn's ``role`` message (entity ``message_id``) to its conversation."""
    phase_key = keys.idempotency_key("user" if role == "user" else "assistant")
    return StorePayload(
        entities=(conversation_entity(keys.conversation_id),),
        relationships=(
            {
                "relationship_type": "PART_OF",
                "source_entity_id": message_id,
                "target_index": 0,
            },
        ),
        idempotency_key=_repair_key(phase_key, "-part-of"),
        conversation_index=0,
        turn_record_index=0,
    )


def repair_attachment(
    keys: TurnKeys, asset: Mapping[str, Any], user_message_id: str, digest: str
) -> StorePayload:
    """Store a ``file_asset`` (``asset``: its fields, ``digest`` its content's sha256)
    embedded in the turn's user message (entity ``user_message_id``)."""
    return StorePayload(
        entities=(dict(asset),),
        relationships=(
            {
                "relationship_type": "EMBEDS",
                "source_entity_id": user_message_id,
                "target_index": 0,
            },
        ),
        idempotency_key=_repair_key(keys.idempotency_key("user"), f"-file-{digest[:16]}"),
        turn_record_index=0,
    )
