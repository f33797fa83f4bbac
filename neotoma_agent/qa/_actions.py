"""Repair actions: what a diagnosis suggests, and the one store request each one makes.

Every action is a frozen value built from facts (ids and exact texts already known), never
from a guess: a missing message is only stored when its exact text is known, and closing a
turn that nobody finished records it as ``abandoned`` rather than inventing a reply.

Each action's store is a pure function of the action (the records and keys a repair
writes are the turn protocol's own, built in the core beside them: ``_engine.repair``),
so running a repair twice replays one store and writes nothing new.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal

import anyio
import anyio.to_thread
import attrs

from ..reads import AUDIT_REPAIR_REASON, message_entity_id, validate_entity_id
from ._core import (
    StorePayload,
    TurnKeys,
    repair_assistant_message,
    repair_attachment,
    repair_close,
    repair_link,
    repair_user_message,
    turn_keys,
)

__all__ = [
    "AUDIT_REPAIR_REASON",
    "AbandonTurn",
    "CompleteTurn",
    "LinkToConversation",
    "RepairAction",
    "StoreAssistantMessage",
    "StoreAttachment",
    "StoreUserMessage",
    "build_payload",
    "message_id_for",
]


# Reasons end up in idempotency keys: keep them to one safe token.
_REASON_RE: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def _check_reason(_: Any, __: Any, value: str) -> None:
    if not isinstance(value, str) or not _REASON_RE.fullmatch(value):
        raise ValueError(f"reason must be a short lowercase token ([a-z0-9_.-]), got {value!r}")


def _check_text(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be the exact text (a str), not {value!r}")


def _check_entity_id(_: Any, __: Any, value: str) -> None:
    validate_entity_id(value)


@attrs.frozen
class _TurnRepair:
    """What every repair action names: the turn it repairs."""

    conversation_id: str
    turn_id: str

    def describe(self) -> str:
        """One line for reports and the ``neotoma_repair`` record."""
        raise NotImplementedError


@attrs.frozen
class _StoreMessage(_TurnRepair):
    """Store a missing half of a turn with its exact text (never invented)."""

    #: what the half is called in reports
    noun: ClassVar[str]

    content: str = attrs.field(validator=_check_text, repr=False)

    def describe(self) -> str:
        return f"Stored the missing {self.noun} of turn {self.turn_id}"


@attrs.frozen
class StoreUserMessage(_StoreMessage):
    """Store a missing user message with its exact text, ``PART_OF`` its conversation."""

    kind: ClassVar[str] = "store_user_message"
    noun: ClassVar[str] = "user message"


@attrs.frozen
class StoreAssistantMessage(_StoreMessage):
    """Store a missing assistant reply with its exact text and mark the turn ``completed``.

    Only built when the exact reply is known (a repair never invents content).
    """

    kind: ClassVar[str] = "store_assistant_message"
    noun: ClassVar[str] = "assistant reply"


@attrs.frozen
class StoreAttachment(_TurnRepair):
    """Record a referenced file that was never stored: its name, size and SHA-256.

    The Transport API has no file upload, so the file's bytes are hashed, not sent: the
    ``file_asset`` entity lets a later reader find and verify the exact file. The user
    message ``EMBEDS`` it.
    """

    kind: ClassVar[str] = "store_attachment"

    file_path: str

    def describe(self) -> str:
        return f"Recorded attachment {os.path.basename(self.file_path)} of turn {self.turn_id}"


@attrs.frozen
class _CloseTurn(_TurnRepair):
    """Close a turn's record with ``status`` and ``reason`` (a subclass gives both)."""

    #: the status the turn's record gets
    status: ClassVar[Literal["abandoned", "completed"]]

    reason: str

    def describe(self) -> str:
        return f"Recorded turn {self.turn_id} as {self.status} ({self.reason})"


@attrs.frozen
class AbandonTurn(_CloseTurn):
    """Close a turn nobody finished: its record becomes ``abandoned`` with ``reason``.

    This is the honest end of an orphan: the user message stays, no reply is invented, and
    the record says why the turn has no reply.
    """

    kind: ClassVar[str] = "abandon_turn"
    status: ClassVar[Literal["abandoned", "completed"]] = "abandoned"

    reason: str = attrs.field(default=AUDIT_REPAIR_REASON, validator=_check_reason)


@attrs.frozen
class CompleteTurn(_CloseTurn):
    """Mark a turn ``completed`` whose two messages are both stored but whose record is not."""

    kind: ClassVar[str] = "complete_turn"
    status: ClassVar[Literal["abandoned", "completed"]] = "completed"

    reason: str = attrs.field(default="both_messages_found_by_audit", validator=_check_reason)


@attrs.frozen
class LinkToConversation(_TurnRepair):
    """Add the missing ``PART_OF`` edge from a stored message to its conversation."""

    kind: ClassVar[str] = "link_to_conversation"

    message_id: str = attrs.field(validator=_check_entity_id)
    role: Literal["user", "assistant"] = "user"

    def describe(self) -> str:
        return f"Linked the {self.role} message of turn {self.turn_id} to its conversation"


RepairAction = (
    StoreUserMessage
    | StoreAssistantMessage
    | StoreAttachment
    | AbandonTurn
    | CompleteTurn
    | LinkToConversation
)


def message_id_for(
    conversation_id: str,
    turn_id: str,
    role: Literal["user", "assistant"],
    tenant: str | None = None,
) -> str:
    """The entity id a store gives the ``role`` message of a turn (derived, no I/O;
    ``tenant``: the store's, as its ``tenant_id`` says).

    Unlike :func:`~neotoma_agent.reads.message_entity_id`, the ids are validated first: a
    repair writes, and writes only what the turn protocol could have written.
    """
    keys = turn_keys(conversation_id, turn_id)
    return message_entity_id(keys.conversation_id, keys.turn_id, role, tenant=tenant)


async def build_payload(action: RepairAction, tenant: str | None = None) -> StorePayload:
    """The one store request that carries out ``action`` (reads the file of an attachment)
    on a store whose entity ids are scoped to ``tenant`` (its ``tenant_id``)."""
    keys = turn_keys(action.conversation_id, action.turn_id)
    if isinstance(action, StoreUserMessage):
        return repair_user_message(keys, action.content)
    if isinstance(action, StoreAssistantMessage):
        return repair_assistant_message(keys, action.content)
    if isinstance(action, _CloseTurn):
        return repair_close(keys, action.status, action.reason)
    if isinstance(action, LinkToConversation):
        return repair_link(keys, action.role, action.message_id)
    return await _attachment_payload(action, keys, tenant)


async def _attachment_payload(
    action: StoreAttachment, keys: TurnKeys, tenant: str | None
) -> StorePayload:
    path = anyio.Path(action.file_path)
    data = await path.read_bytes()
    digest = await anyio.to_thread.run_sync(lambda: hashlib.sha256(data).hexdigest())
    mime, _ = mimetypes.guess_type(action.file_path)
    asset: dict[str, Any] = {
        "entity_type": "file_asset",
        # Keyed by content: the same file attached twice is one entity.
        "canonical_name": f"file_asset:sha256:{digest}",
        "original_filename": os.path.basename(action.file_path),
        "file_path": action.file_path,
        "content_hash": digest,
        "file_size": len(data),
    }
    if mime is not None:
        asset["mime_type"] = mime
    user_id = message_id_for(action.conversation_id, action.turn_id, "user", tenant)
    return repair_attachment(keys, asset, user_id, digest)


def action_json(action: RepairAction) -> Mapping[str, Any]:
    """The action as plain JSON (texts are summarised by length, never copied)."""
    out: dict[str, Any] = {"kind": action.kind, "description": action.describe()}
    if isinstance(action, StoreUserMessage | StoreAssistantMessage):
        out["content_chars"] = len(action.content)
    elif isinstance(action, StoreAttachment):
        out["file_path"] = action.file_path
    elif isinstance(action, _CloseTurn):
        out["reason"] = action.reason
    else:
        out["message_id"] = action.message_id
        out["role"] = action.role
    return out
