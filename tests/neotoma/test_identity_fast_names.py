"""A bookkeeping name ("type:value" in printable ASCII) skips the name rules' steps: what it
gets must be what the steps give it, for any text and any type."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent._neotoma import identity
from neotoma_agent._neotoma.identity import (
    entity_id_for,
    format_canonical_name,
    normalize,
    resolve_identity,
)

# Types whose rules edit names, and types whose rules do not.
_TYPES = ("conversation_message", "conversation_turn", "conversation", "note", "company")
_TYPES += ("organization", "person", "contact", "Person", "task")
# Every character a rule decides on: "@" (email), JavaScript's whitespace (ASCII and not),
# the punctuation runs, letters that lowercase to more than one code point, a legal suffix
# and honorifics (with a space and without), and the printable ASCII the fast path takes.
_CHARS = st.sampled_from(
    [
        *"aZ09_:-.,;!?'\"()[]{}/\\@ \t\n\x0b\x0c\r~`#$%^&*+=<>|",
        *("\u00a0", "\u2003", "\ufeff", "\u0130", "\u00e9", "\u212a", "\u1e9e"),
        *(" Inc", "Dr. ", "dr", "Mr.", "ii", "IV", "sir", "prof"),
    ]
)
_TEXT = st.lists(_CHARS, max_size=24).map("".join)
_NAME = st.one_of(
    _TEXT,
    st.tuples(st.sampled_from((*_TYPES, "id", "x", "A_1", "")), _TEXT).map(":".join),
)
_NEVER = re.compile(r"(?!)")


def _slow(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pipeline as it was: no text takes the fast answer.
    monkeypatch.setattr(identity, "_PLAIN_ID_NAME", _NEVER)


@given(entity_type=st.sampled_from(_TYPES), text=_NAME)
def test_name_rules_fast_answer_is_the_pipelines(entity_type: str, text: str) -> None:
    fast = (
        identity._name_rules(entity_type, text),
        format_canonical_name(entity_type, text),
        normalize.__wrapped__(entity_type, text),
        entity_id_for(entity_type, text, "u1"),
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        _slow(monkeypatch)
        normalize.cache_clear()
        slow = (
            identity._name_rules(entity_type, text),
            format_canonical_name(entity_type, text),
            normalize.__wrapped__(entity_type, text),
            entity_id_for(entity_type, text, "u1"),
        )
    normalize.cache_clear()
    assert fast == slow


@pytest.mark.parametrize(
    ("entity_type", "fields"),
    [
        ("conversation_message", {"turn_key": "peers-0005:t5"}),
        ("conversation_message", {"turn_key": "c-1:t2:assistant"}),
        ("conversation_turn", {"session_id": "peers-0005", "turn_id": "t5"}),
        ("conversation", {"conversation_id": "9b2f-UUID_like.x"}),
        ("company", {"name": "Acme:Inc"}),
        ("note", {"title": "id:Some-Thing"}),
    ],
)
def test_bookkeeping_identities_are_the_pipelines(
    entity_type: str, fields: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The identities a turn derives, fast and through every step: the same names and ids.
    fast = resolve_identity(entity_type, fields)
    _slow(monkeypatch)
    normalize.cache_clear()
    try:
        assert resolve_identity(entity_type, fields) == fast
    finally:
        normalize.cache_clear()
