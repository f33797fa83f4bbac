"""Property tests: idempotency keys are equal exactly when the turns' entities are.

A store derives entity ids from canonical names it folds (case, whitespace runs); keys that
folded differently would let two ids naming one message be stored as two turns (the second
overwriting the first), and keys that did not separate ``-`` would refuse a distinct turn.

Examples per test come from the hypothesis profile (tests/conftest.py): a few hundred by
default, ``pytest --hypothesis-profile=thorough tests/records/test_key_properties.py`` for more.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent._neotoma.identity import resolve_identity
from neotoma_agent._records.keys import Phase, TurnKeys, key_phase, turn_keys
from neotoma_agent.testing import RecordingTransport

PHASES: tuple[Phase, ...] = ("user", "assistant", "abandoned", "recorded")

# JavaScript whitespace (folded by the server) and Python-only whitespace (not folded).
SPACES = " \u00a0\u3000\v\f\u2028\ufeff"
# Letters whose lowercase differs in length or is shared (Kelvin sign, dotted I, sigma).
LETTERS = "aAbBzZ09İıiIßẞΣσςkK\u212a"
ALPHABET = LETTERS + SPACES + "-_.:|@\x1c" + "\t\n\x00"

short_ids = st.text(ALPHABET, max_size=10)
long_ids = st.builds(
    lambda s, n: s * n, st.text(ALPHABET, min_size=1, max_size=3), st.integers(60, 400)
)
ids = short_ids | long_ids


@st.composite
def variant(draw: st.DrawFn, value: str) -> str:
    """``value`` with letter case flipped and whitespace runs changed here and there."""
    out = []
    for ch in value:
        if ch in SPACES and draw(st.booleans()):
            out.append(draw(st.text(SPACES, min_size=1, max_size=3)))
        elif draw(st.booleans()):
            out.append(ch.swapcase())
        else:
            out.append(ch)
    return "".join(out)


@st.composite
def id_pairs(draw: st.DrawFn) -> tuple[tuple[str, str], tuple[str, str]]:
    """Two (conversation_id, turn_id) pairs, often ones that fold or split alike."""
    kind = draw(st.sampled_from(["independent", "variant", "resplit"]))
    if kind == "resplit":
        # One string cut at two places: "a-b" + "c" against "a" + "b-c".
        whole = draw(st.text(ALPHABET, min_size=2, max_size=12))
        i, j = draw(st.integers(1, len(whole) - 1)), draw(st.integers(1, len(whole) - 1))
        return (whole[:i], whole[i:]), (draw(variant(whole[:j])), draw(variant(whole[j:])))
    one = (draw(ids), draw(ids))
    if kind == "variant":
        return one, (draw(variant(one[0])), draw(variant(one[1])))
    return one, (draw(ids), draw(ids))


def keys_or_none(
    conversation_id: str, turn_id: str, revision: int | None = None
) -> TurnKeys | None:
    try:
        return turn_keys(conversation_id, turn_id, revision)
    except ValueError:
        return None


def entity_ids(conversation_id: str, turn_id: str) -> dict[str, str]:
    """What a store would name this turn's entities (never through the code under test)."""
    keys = TurnKeys(conversation_id, turn_id)
    names = {
        "user": ("conversation_message", {"turn_key": keys.user_turn_key}),
        "assistant": ("conversation_message", {"turn_key": keys.assistant_turn_key}),
        "record": ("conversation_turn", {"session_id": conversation_id, "turn_id": turn_id}),
        "conversation": ("conversation", {"conversation_id": conversation_id}),
    }
    return {k: resolve_identity(t, fields).entity_id for k, (t, fields) in names.items()}


def sigma_blind(value: str) -> str:
    # Lowercasing Σ depends on what follows it, which differs between a turn's names; keys
    # read every sigma as one letter (see fold_turn_ids).
    return value.replace("Σ", "σ").replace("ς", "σ")


def check_pairs(one: tuple[str, str], other: tuple[str, str]) -> None:
    a, b = keys_or_none(*one), keys_or_none(*other)
    if a is None or b is None:
        return
    ids_a, ids_b = entity_ids(*one), entity_ids(*other)
    shared = any(ids_a[k] == ids_b[k] for k in ("user", "assistant", "record"))
    blind_a = entity_ids(*map(sigma_blind, one))
    blind_b = entity_ids(*map(sigma_blind, other))
    same_turn = blind_a["user"] == blind_b["user"]
    for phase in PHASES:
        key = a.idempotency_key(phase)
        equal = key == b.idempotency_key(phase)
        # Never two turns writing one entity; equal keys only for one (sigma-blind) message.
        if shared:
            assert equal, (one, other, phase)
        assert equal == same_turn, (one, other, phase)
        if equal:
            assert blind_a["conversation"] == blind_b["conversation"]
        assert key_phase(key) == phase
        for revision in (2, 3):
            revised = turn_keys(*one, revision).idempotency_key(phase)
            assert key_phase(revised) == phase
            assert revised != b.idempotency_key(phase)
            assert (revised == turn_keys(*other, revision).idempotency_key(phase)) == equal
        for other_phase in PHASES:
            if other_phase != phase:
                assert key != b.idempotency_key(other_phase)


@given(id_pairs())
@example((("support", "msg-A1"), ("support", "msg-a1")))
@example((("Chat", "t"), ("chat", "t")))
@example((("a  b", "t"), ("a b", "t")))
@example((("a-b", "c"), ("a", "b-c")))
@example((("a", "Σ"), ("a", "σ")))
@example((("Σ", "ß"), ("σ", "ß")))
@example((("c", "a  x@"), ("c", "a x@")))
@example((("0", "0"), ("0", "\ufeff")))
def test_keys_are_equal_exactly_when_the_user_messages_are(
    pairs: tuple[tuple[str, str], tuple[str, str]],
) -> None:
    check_pairs(*pairs)


class _NoIO:
    """A transport that fails the test if anything reaches it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"I/O before validation: {name}")


@given(ids, ids)
@example("0", "\ufeff")
@example("\ufeff", "0")
def test_refused_ids_raise_a_typed_error_before_any_io(conversation_id: str, turn_id: str) -> None:
    keys = keys_or_none(conversation_id, turn_id)
    if keys is not None:
        # Accepted ids always yield keys and entities a store can name (the server's trim
        # would leave nothing of "\ufeff": the turn record could not be stored mid-turn).
        assert all(key_phase(keys.idempotency_key(p)) == p for p in PHASES)
        entity_ids(conversation_id, turn_id)
        return
    recorder = RecordingTransport(_NoIO())  # type: ignore[arg-type]
    try:
        mem = NeotomaMemory(recorder, conversation_id=conversation_id)
    except ValueError:
        assert recorder.calls == []
        return
    with pytest.raises(ValueError, match="turn_id"):
        mem.turn("hello", turn_id=turn_id)
    with pytest.raises(ValueError, match="turn_id"):
        anyio.run(functools.partial(mem.record_turn, "hello", "hi", turn_id=turn_id))
    assert recorder.calls == []


def slow_fold(conversation_id: str, turn_id: str) -> tuple[str, str]:
    """The fold spelled out through identity resolution (what the fast path must equal)."""
    from neotoma_agent._neotoma.identity import normalize

    name = resolve_identity("conversation_message", {"turn_key": f"{conversation_id}:{turn_id}"})
    folded = normalize("conversation_message", name.canonical_name)
    cid, _, tid = folded.removeprefix("conversation_message:").replace("ς", "σ").rpartition(":")
    return cid, tid


printable_ids = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7F), min_size=1)


@given(printable_ids | ids, printable_ids | ids)
@example("support-42", "import-1")
@example("a@b.c", "x")
@example("A@B", "x")
def test_fold_fast_path_equals_identity_resolution(conversation_id: str, turn_id: str) -> None:
    from neotoma_agent._records.keys import fold_turn_ids

    try:
        expected = slow_fold(conversation_id, turn_id)
    except Exception:  # not a name a store could hold; keys_or_none refuses such ids
        return
    assert fold_turn_ids(conversation_id, turn_id) == expected
