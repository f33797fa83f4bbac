"""A turn's user store (the enter's write) as pure functions, the one source of its payload.

The async turn engine (``_phases.Phases.enter``) and a hook opening a turn on an embedded
store file without the event loop (``hooks._embedded_open``) both build the user store from
here and read what it wrote (:class:`~._phase_records.Opened`) off the store's answer the
same way, as both build the closing store from ``_closing``. No I/O and no event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._clock import iso_ms, now_ms
from ._keys import TurnKeys, turn_id_ms
from ._payloads import ConversationSettings, RunFields, StorePayload, user_payload
from ._phase_records import Opened
from .transport._results import StoreResult

__all__ = ["created", "entry_id", "opened_from", "started_at", "user_builder"]


def started_at(keys: TurnKeys) -> str:
    """When the turn started: the time its id carries (a UUIDv7, the default), else now.

    Derived from the id where it can be, so a re-run sends the same value (and replays
    without a read); for other ids, :meth:`Phases.store_turn_phase` recovers it.
    """
    ms = turn_id_ms(keys.turn_id)
    return iso_ms(now_ms() if ms is None else ms)


def user_builder(
    conversation: ConversationSettings,
    keys: TurnKeys,
    user_message: str,
    *,
    turn_number: int | None,
    user_extra: Mapping[str, Any] | None,
    model: str | None,
) -> Callable[[Sequence[str], RunFields], StorePayload]:
    """The user store's payload, as a function of the ids it REFERS_TO and the run fields."""

    def build(refers_to: Sequence[str], fields: RunFields) -> StorePayload:
        return user_payload(
            conversation,
            keys,
            user_message,
            turn_number=turn_number,
            user_extra=user_extra,
            refers_to=refers_to,
            model=model,
            run=fields,
        )

    return build


def entry_id(result: StoreResult, index: int | None, entity_type: str) -> str | None:
    """The id of request element ``index`` in the store's answer (``None``: not there)."""
    if index is None:
        return None
    try:
        return result.entity_id(index)
    except IndexError:
        # A replay the transport could not align: each type occurs once per payload.
        matches = [e.entity_id for e in result.entities if e.entity_type == entity_type]
        return matches[0] if len(matches) == 1 else None


def _entry_snapshot(result: StoreResult, index: int, entity_type: str) -> Mapping[str, Any]:
    for e in result.entities:
        if e.observation_index == index or (
            e.observation_index is None and e.entity_type == entity_type
        ):
            return e.snapshot or {}
    return {}


def created(stored: StoreResult, index: int | None) -> bool:
    """Whether the store created the entity of request element ``index`` (a replay:
    unknown, so no)."""
    if index is None or stored.replayed:
        return False
    return any(e.observation_index == index and e.action == "created" for e in stored.entities)


def opened_from(
    keys: TurnKeys, turn_number: int | None, stored: StoreResult, request: StorePayload
) -> Opened:
    """What the user store ``request`` wrote, read off the store's answer ``stored``."""
    record_index = request.turn_record_index
    prior = _entry_snapshot(stored, record_index, "conversation_turn").get("status")
    started = request.entities[record_index].get("started_at")
    return Opened(
        keys=keys,
        turn_number=turn_number,
        user_message_id=entry_id(stored, request.user_index, "conversation_message") or "",
        conversation_entity_id=entry_id(stored, request.conversation_index, "conversation") or "",
        turn_record_id=entry_id(stored, record_index, "conversation_turn"),
        replayed=stored.replayed,
        prior_status=prior if stored.replayed and isinstance(prior, str) else None,
        started_at=started if isinstance(started, str) else None,
        started_conversation=created(stored, request.conversation_index),
    )
