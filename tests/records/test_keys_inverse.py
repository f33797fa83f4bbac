"""The inverse of the keys: a turn_key parses back, and entity ids derive from the ids."""

from __future__ import annotations

import pytest

from neotoma_agent._neotoma.identity import resolve_identity
from neotoma_agent._records.keys import (
    conversation_entity_id,
    message_entity_id,
    parse_turn_key,
    turn_keys,
    turn_record_entity_id,
)


@pytest.mark.parametrize(
    ("conversation_id", "turn_id"), [("c", "t1"), ("a:b", "t"), ("support 42", "m-1001")]
)
def test_a_turn_key_parses_back_into_its_ids_and_role(conversation_id: str, turn_id: str) -> None:
    keys = turn_keys(conversation_id, turn_id)
    assert parse_turn_key(keys.user_turn_key) == (conversation_id, turn_id, "user")
    assert parse_turn_key(keys.assistant_turn_key) == (conversation_id, turn_id, "assistant")


@pytest.mark.parametrize("turn_key", ["", "c", "c:", ":t", "c:assistant", "assistant"])
def test_a_key_of_another_shape_does_not_parse(turn_key: str) -> None:
    assert parse_turn_key(turn_key) is None


def test_a_known_conversation_keeps_another_writers_turn_id_whole() -> None:
    assert parse_turn_key("c:x:y") == ("c:x", "y", "user")
    assert parse_turn_key("c:x:y:assistant", "c") == ("c", "x:y", "assistant")
    assert parse_turn_key("d:x", "c") == ("d", "x", "user")


def test_entity_ids_derive_as_the_store_derives_them() -> None:
    assert conversation_entity_id("c") == (
        resolve_identity("conversation", {"conversation_id": "c"}).entity_id
    )
    assert message_entity_id("c", "t", "assistant") == (
        resolve_identity("conversation_message", {"turn_key": "c:t:assistant"}).entity_id
    )
    assert message_entity_id("c", "t", "user") != message_entity_id("c", "t", "assistant")
    assert turn_record_entity_id("c", "t") == (
        resolve_identity("conversation_turn", {"session_id": "c", "turn_id": "t"}).entity_id
    )
