"""Turn ids, turn keys and idempotency keys: the strings that decide what merges."""

from __future__ import annotations

import json
import threading

import pytest
from turn_support import db_path, memory, store

from neotoma_agent._keys import (
    TurnKeys,
    new_turn_id,
    turn_keys,
    validate_entity_id,
    validate_turn_id,
)
from neotoma_agent._payloads import (
    ConversationSettings,
    abandoned_payload,
    closing_payload,
    recorded_payload,
    user_payload,
)
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures


def test_turn_keys_and_idempotency_keys_have_the_protocol_shapes() -> None:
    keys = turn_keys("chat-42", "7")
    assert keys.user_turn_key == "chat-42:7"
    assert keys.assistant_turn_key == "chat-42:7:assistant"
    assert keys.idempotency_key("user") == "conversation-chat-42-7-user-turn"
    assert keys.idempotency_key("assistant") == "conversation-chat-42-7-assistant-turn"
    assert keys.idempotency_key("abandoned") == "conversation-chat-42-7-abandoned"


def test_revisions_change_idempotency_keys_but_not_turn_keys() -> None:
    first, again, second = turn_keys("c", "t"), turn_keys("c", "t", 1), turn_keys("c", "t", 2)
    assert first.idempotency_key("assistant") == again.idempotency_key("assistant")
    assert second.idempotency_key("assistant") == "conversation-c-t-assistant-turn-r2"
    assert second.assistant_turn_key == first.assistant_turn_key


@pytest.mark.parametrize(
    "turn_id",
    ["", "   ", "a:b", "assistant", "Assistant", " t1", "t1\n", "a|b"],
)
def test_turn_ids_that_could_merge_two_turns_are_refused(turn_id: str) -> None:
    with pytest.raises(ValueError, match="turn_id"):
        validate_turn_id(turn_id)


@pytest.mark.parametrize("conversation_id", ["", " ", " chat", "chat\t"])
def test_unusable_conversation_ids_are_refused(conversation_id: str) -> None:
    with pytest.raises(ValueError, match="conversation_id"):
        turn_keys(conversation_id, "t1")


def test_revision_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="revision"):
        turn_keys("c", "t", 0)
    with pytest.raises(TypeError, match="revision"):
        turn_keys("c", "t", True)


def test_entity_ids_are_checked() -> None:
    assert validate_entity_id("ent_af939bedafbd1838b259772a")
    for bad in (
        "ent_AF939BEDAFBD1838B259772A",
        "ent_123",
        "acme",
        "ent_af939bedafbd1838b259772a\n",
    ):
        with pytest.raises(ValueError, match="entity id"):
            validate_entity_id(bad)


def test_default_turn_ids_are_unique_time_ordered_and_key_safe() -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        batch = [new_turn_id() for _ in range(2000)]
        with lock:
            ids.extend(batch)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(ids)) == len(ids) == 8000
    sequential = [new_turn_id() for _ in range(1000)]
    assert sequential == sorted(sequential)
    for turn_id in sequential[:10]:
        assert validate_turn_id(turn_id) == turn_id
        assert len(turn_id) == 36
        assert turn_id[14] == "7"  # UUIDv7 layout


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"turn_id": ""}, "turn_id"),
        ({"turn_id": "a:b"}, "turn_id"),
        ({"turn_id": "assistant"}, "turn_id"),
        ({"revision": 0}, "revision"),
        ({"turn_number": -1}, "turn_number"),
        ({"user_extra": {"content": "override"}}, "user_extra"),
        ({"user_extra": {"turn_key": "x"}}, "user_extra"),
    ],
)
async def test_bad_arguments_raise_before_any_io(
    store: EmbeddedStore, kwargs: dict[str, object], message: str
) -> None:
    recorder = RecordingTransport(store)
    mem = memory(recorder)
    with pytest.raises(ValueError, match=message):
        mem.turn("hello", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        await mem.open_turn("hello", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        await mem.record_turn("hello", "hi", **kwargs)  # type: ignore[arg-type]
    assert recorder.calls == []


@pytest.mark.anyio
async def test_a_non_str_message_raises_before_any_io(store: EmbeddedStore) -> None:
    recorder = RecordingTransport(store)
    with pytest.raises(TypeError):
        memory(recorder).turn(b"hello")  # type: ignore[arg-type]
    assert recorder.calls == []


# Payloads are pure: the store hashes entities to tell a replay from a mismatch.

SETTINGS = ConversationSettings("chat-42", platform="tests", title="Trip")
KEYS = TurnKeys("chat-42", "7")
CONV = "ent_f15284c1f078e824e4e9bb3b"


def test_entities_do_not_depend_on_retrieval_or_citations() -> None:
    plain = closing_payload(
        SETTINGS, KEYS, "reply", conversation_entity_id=CONV, user_message_id=None
    )
    wired = closing_payload(
        SETTINGS,
        KEYS,
        "reply",
        conversation_entity_id=CONV,
        user_message_id="ent_" + "1" * 24,
        retrieved_ids=["ent_" + "2" * 24],
        cited_ids=["ent_" + "3" * 24],
    )
    assert json.dumps(plain.entities) == json.dumps(wired.entities)
    assert plain.idempotency_key == wired.idempotency_key
    assert len(wired.relationships) == 4  # PART_OF, 2x assistant REFERS_TO, user REFERS_TO


def test_payloads_are_a_pure_function_of_their_inputs() -> None:
    def build() -> list[str]:
        return [
            json.dumps(user_payload(SETTINGS, KEYS, "hi", user_extra={"b": 1, "a": 2}).entities),
            json.dumps(
                closing_payload(
                    SETTINGS, KEYS, "yo", conversation_entity_id=CONV, user_message_id=None
                ).entities
            ),
            json.dumps(
                abandoned_payload(
                    SETTINGS,
                    KEYS,
                    "y",
                    "ValueError",
                    conversation_entity_id=CONV,
                    user_message_id=None,
                ).entities
            ),
            json.dumps(recorded_payload(SETTINGS, KEYS, "hi", "yo").entities),
        ]

    assert build() == build()
    extra_reordered = user_payload(SETTINGS, KEYS, "hi", user_extra={"a": 2, "b": 1})
    assert json.dumps(extra_reordered.entities) == build()[0]


def test_abandoned_payload_holds_the_partial_reply_only_when_there_is_one() -> None:
    empty = abandoned_payload(
        SETTINGS, KEYS, "", "trio.Cancelled", conversation_entity_id=CONV, user_message_id=None
    )
    assert [e["entity_type"] for e in empty.entities] == ["conversation_turn"]
    partial = abandoned_payload(
        SETTINGS, KEYS, "Hel", "trio.Cancelled", conversation_entity_id=CONV, user_message_id=None
    )
    assert [e["entity_type"] for e in partial.entities] == [
        "conversation_message",
        "conversation_turn",
    ]
    assert partial.entities[1]["status"] == "abandoned"
    assert partial.entities[1]["error_class"] == "trio.Cancelled"


def test_closing_stores_name_the_conversation_by_id_when_they_know_it() -> None:
    known = closing_payload(SETTINGS, KEYS, "r", conversation_entity_id=CONV, user_message_id=None)
    assert [e["entity_type"] for e in known.entities] == [
        "conversation_message",
        "conversation_turn",
    ]
    assert known.relationships[0] == {
        "relationship_type": "PART_OF",
        "source_index": 0,
        "target_entity_id": CONV,
    }
    unknown = closing_payload(
        SETTINGS, KEYS, "r", conversation_entity_id=None, user_message_id=None
    )
    assert [e["entity_type"] for e in unknown.entities] == [
        "conversation",
        "conversation_message",
        "conversation_turn",
    ]
    assert unknown.relationships[0] == {
        "relationship_type": "PART_OF",
        "source_index": 1,
        "target_index": 0,
    }
