"""Turn ids, turn keys and idempotency keys: the strings that decide what merges."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli, show_json
from turn_support import db_path, memory, messages, store, turn_record

from neotoma_agent._neotoma.identity import resolve_identity
from neotoma_agent._records.keys import (
    Phase,
    TurnKeys,
    key_phase,
    new_turn_id,
    turn_keys,
    validate_entity_id,
    validate_turn_id,
)
from neotoma_agent._records.payloads import (
    ConversationSettings,
    StorePayload,
    closing_payload,
    recorded_payload,
    user_payload,
)
from neotoma_agent.exceptions import IdempotencyMismatchError
from neotoma_agent.qa._actions import (
    AbandonTurn,
    StoreAssistantMessage,
    StoreUserMessage,
    build_payload,
    message_id_for,
)
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport.embedded import EmbeddedStore

__all__ = ["db_path", "store"]  # fixtures

PHASES: tuple[Phase, ...] = ("user", "assistant", "abandoned", "recorded")


def test_turn_keys_and_idempotency_keys_have_the_protocol_shapes() -> None:
    keys = turn_keys("chat-42", "7")
    assert keys.user_turn_key == "chat-42:7"
    assert keys.assistant_turn_key == "chat-42:7:assistant"
    for phase in ("user", "assistant", "abandoned", "recorded"):
        key = keys.idempotency_key(phase)
        assert re.fullmatch(f"conversation-chat-42-7-{phase}-[0-9a-f]{{16}}", key), key
        assert key_phase(key) == phase
    # The digest is of the id pair alone: every phase of one turn carries the same one.
    assert len({k.rsplit("-", 1)[1] for k in map(keys.idempotency_key, PHASES)}) == 1


def test_revisions_change_idempotency_keys_but_not_turn_keys() -> None:
    first, again, second = turn_keys("c", "t"), turn_keys("c", "t", 1), turn_keys("c", "t", 2)
    assert first.idempotency_key("assistant") == again.idempotency_key("assistant")
    assert second.idempotency_key("assistant") == first.idempotency_key("assistant") + "-r2"
    assert key_phase(second.idempotency_key("assistant")) == "assistant"
    assert second.assistant_turn_key == first.assistant_turn_key


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("support", "msg-A1"), ("support", "msg-a1")),
        (("Chat", "t1"), ("chat", "t1")),
        (("a  b", "t1"), ("a b", "t1")),
        (("a\u3000\u00a0b", "x  Y"), ("A b", "x y")),
    ],
)
def test_ids_that_fold_together_are_one_turn(one: tuple[str, str], other: tuple[str, str]) -> None:
    # The server folds case and whitespace runs in canonical names: these pairs name the
    # same message entities, so they must share keys (a replay or a mismatch, never a merge).
    assert message_id_for(*one, "user") == message_id_for(*other, "user")
    for revision in (None, 2):
        a, b = turn_keys(*one, revision), turn_keys(*other, revision)
        assert [a.idempotency_key(p) for p in PHASES] == [b.idempotency_key(p) for p in PHASES]
        assert a.folded == b.folded


def test_ids_split_differently_by_the_separator_get_distinct_keys() -> None:
    a, b = turn_keys("a-b", "c"), turn_keys("a", "b-c")
    assert message_id_for("a-b", "c", "user") != message_id_for("a", "b-c", "user")
    for phase in PHASES:
        assert a.idempotency_key(phase) != b.idempotency_key(phase)
        assert a.idempotency_key(phase).startswith(f"conversation-a-b-c-{phase}-")
    assert turn_keys("a-b", "c", 2).idempotency_key("user") != turn_keys(
        "a", "b-c", 2
    ).idempotency_key("user")


def test_key_phase_reads_every_key_a_turn_writes() -> None:
    keys = turn_keys("Chat-1", "msg-assistant-r2")
    for phase in PHASES:
        assert key_phase(keys.idempotency_key(phase)) == phase
        assert key_phase(turn_keys("c", "t", 3).idempotency_key(phase)) == phase
    # The abandoned phase's fallback appends a content digest to its key.
    assert key_phase(keys.idempotency_key("abandoned") + "-0123456789ab") == "abandoned"
    for other in (
        "conversation-chat-42-7-user-turn",  # 0.1 keys
        keys.idempotency_key("user") + "-repair",
        "neotoma-repair-c-t-0123456789abcdef",
        "seed-company-Acme",
    ):
        assert key_phase(other) is None


@pytest.mark.parametrize(
    "turn_id",
    ["", "   ", "a:b", "assistant", "Assistant", " t1", "t1\n", "a|b", "\ufeff", "t1\u3000"],
)
def test_turn_ids_that_could_merge_two_turns_are_refused(turn_id: str) -> None:
    with pytest.raises(ValueError, match="turn_id"):
        validate_turn_id(turn_id)


@pytest.mark.parametrize(
    "turn_id", ["a\x1b[2Jb", "a\x07", "a\x7f", "a\x9bb", "x\udfff", "\ud83d\ude00"]
)
def test_turn_ids_with_controls_or_surrogates_are_refused_before_any_io(turn_id: str) -> None:
    # Controls act on a terminal that lists ids; a surrogate is half a character no store
    # can encode (a pair is refused too: pass the character itself).
    with pytest.raises(ValueError, match="turn_id"):
        turn_keys("c", turn_id)


@pytest.mark.parametrize("conversation_id", ["", " ", " chat", "chat\t", "\ufeffchat"])
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

SETTINGS = ConversationSettings(platform="tests", title="Trip")
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
                closing_payload(
                    SETTINGS,
                    KEYS,
                    "y",
                    error_class="ValueError",
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
    def abandoned(partial_reply: str) -> StorePayload:
        return closing_payload(
            SETTINGS,
            KEYS,
            partial_reply,
            error_class="trio.Cancelled",
            conversation_entity_id=CONV,
            user_message_id=None,
        )

    empty = abandoned("")
    assert [e["entity_type"] for e in empty.entities] == ["conversation_turn"]
    partial = abandoned("Hel")
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


# Ids that fold together, and ids the separator would confuse, on a real store.

TEXTS = ("refund order 1", "done 1", "cancel order 2", "done 2")


async def _snapshot(store: EmbeddedStore, conversation_id: str) -> dict[str, Any]:
    """Every message of the conversation with its content and observation count, read back."""
    conversation = resolve_identity("conversation", {"conversation_id": conversation_id})
    out: dict[str, Any] = {}
    for turn_key, message in (await messages(store, conversation.entity_id)).items():
        observed = await store.list_observations(message["id"])
        out[turn_key] = (message["content"], len(observed.observations))
    return out


@pytest.mark.anyio
async def test_a_turn_id_folding_into_a_stored_one_is_refused_not_merged(
    store: EmbeddedStore,
) -> None:
    mem = memory(store, "support")
    async with mem.turn("refund order 1", turn_id="msg-A1") as t:
        t.reply = "done 1"
    before = await _snapshot(store, "support")
    with pytest.raises(IdempotencyMismatchError) as caught:
        async with mem.turn("cancel order 2", turn_id="msg-a1") as t:
            t.reply = "done 2"
    text = f"{caught.value} {caught.value.hint}"
    assert "fold" in text
    assert "'msg-a1'" in text
    assert not any(content in text for content in TEXTS)
    assert await _snapshot(store, "support") == before
    assert before == {
        "support:msg-A1": ("refund order 1", 1),
        "support:msg-A1:assistant": ("done 1", 1),
    }


@pytest.mark.anyio
async def test_the_same_turn_under_an_id_that_folds_into_it_is_a_mismatch(
    store: EmbeddedStore,
) -> None:
    # Not a replay: the payload records the ids as given (turn_key, turn_id), so the second
    # store's entities differ from the first's even though the texts are equal.
    for conversation_id in ("Support", "support"):
        mem = memory(store, conversation_id)
        if conversation_id == "Support":
            async with mem.turn("refund order 1", turn_id="msg  A1") as t:
                t.reply = "done 1"
            before = await _snapshot(store, "support")
            continue
        with pytest.raises(IdempotencyMismatchError, match="fold") as caught:
            async with mem.turn("refund order 1", turn_id="msg A1") as t:
                t.reply = "done 1"
        assert "turn 'msg a1' of conversation 'support'" in str(caught.value)
    assert await _snapshot(store, "support") == before


@pytest.mark.anyio
async def test_turns_split_differently_by_the_separator_are_both_stored(
    store: EmbeddedStore,
) -> None:
    async with memory(store, "a-b").turn("refund order 1", turn_id="c") as t:
        t.reply = "done 1"
    async with memory(store, "a").turn("cancel order 2", turn_id="b-c") as t2:
        t2.reply = "done 2"
    assert not t2.result.replayed
    assert await _snapshot(store, "a-b") == {
        "a-b:c": ("refund order 1", 1),
        "a-b:c:assistant": ("done 1", 1),
    }
    assert await _snapshot(store, "a") == {
        "a:b-c": ("cancel order 2", 1),
        "a:b-c:assistant": ("done 2", 1),
    }


def test_importing_ids_that_fold_together_does_not_store_two_turns(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    transcript = tmp_path / "x.jsonl"
    lines = [
        {"conversation_id": "support", "turn_id": turn_id, "user": user, "assistant": reply}
        for turn_id, user, reply in (
            ("msg-A1", "refund order 1", "done 1"),
            ("msg-a1", "cancel order 2", "done 2"),
        )
    ]
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = cli("import", str(transcript), "--no-retrieve", "--db", str(db), home=tmp_path)
    assert "stored 1 new turn\n" in result.stdout, result.stdout
    assert result.returncode == 1  # the second line is refused, not merged
    assert "cancel order 2" not in result.stderr
    (turn,) = show_json(db, "support", tmp_path)["turns"]
    assert [m["content"] for m in turn["messages"]] == ["refund order 1", "done 1"]


# Stores written by 0.1 hold keys without the digest (CHANGELOG 0.2).

_OLD_SUFFIX = {"user": "user-turn", "assistant": "assistant-turn", "abandoned": "abandoned"}


class _OldKeys(RecordingTransport):
    """Stores turns of conversation ``chat-1`` under the keys 0.1 gave them."""

    async def store(self, entities: Any, *, idempotency_key: str, **kw: Any) -> Any:
        turn_key = next(e["turn_key"] for e in entities if "turn_key" in e)
        turn_id = turn_key.split(":")[1]
        phase = key_phase(idempotency_key) or "user"
        old = f"conversation-chat-1-{turn_id}-{_OLD_SUFFIX[phase]}"
        return await super().store(entities, idempotency_key=old, **kw)


@pytest.mark.anyio
async def test_rerunning_a_turn_stored_by_0_1_keeps_one_turn_with_its_text(
    store: EmbeddedStore,
) -> None:
    # Not a replay of the old key. Turn records now carry the time a run ended (and, for a
    # caller's turn id, when it started), so the re-run is other content under another key:
    # the same entities get an observation more, the texts and the turn stay as they were.
    for turn_id in ("t1", "t2"):
        async with memory(_OldKeys(store)).turn("Question", turn_id=turn_id) as t:
            t.reply = "Answer"
    before = {k: text for k, (text, _) in (await _snapshot(store, "chat-1")).items()}
    record = await turn_record(store, "chat-1", "t1")
    async with memory(store).turn("Question", turn_id="t1") as again:
        again.reply = "Answer"
    assert not again.result.replayed
    after = {k: text for k, (text, _) in (await _snapshot(store, "chat-1")).items()}
    assert after == before
    rerun = await turn_record(store, "chat-1", "t1")
    assert (rerun["id"], rerun["status"]) == (record["id"], "completed")
    # What 0.1 keys lose: a different reply to an old turn is no longer refused, it is
    # recorded as a new observation (as revision=2 would record it).
    async with memory(store).turn("Question", turn_id="t2") as changed:
        changed.reply = "Another answer"
    assert (await _snapshot(store, "chat-1"))["chat-1:t2:assistant"] == ("Another answer", 2)


@pytest.mark.anyio
async def test_repair_keys_follow_the_turn_keys(anyio_backend: str) -> None:
    async def key(action: Any) -> str:
        return (await build_payload(action)).idempotency_key

    for make in (
        lambda c, t: StoreUserMessage(c, t, "text"),
        lambda c, t: StoreAssistantMessage(c, t, "text"),
        lambda c, t: AbandonTurn(c, t),
    ):
        assert await key(make("Chat", "msg-A1")) == await key(make("chat", "msg-a1"))
        assert await key(make("a-b", "c")) != await key(make("a", "b-c"))
        assert key_phase(await key(make("a", "b"))) is None  # a repair is no phase of a turn
