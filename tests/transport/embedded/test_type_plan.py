"""The plan per type (``_type_plan``): a new message or turn record written from its
payload in one pass stores and answers what the general write stores and answers.

The same stores run on two files, one with the plan and one without it (every element
through ``_write._observe``), with the store's clock fixed: turns' payloads as the turn
machine builds them (any text, any conversation settings, models, turn numbers and extra
message fields, run times canonical or not), payloads of these types of any fields, a
user's view, replays of a key, and a store that names an entity it created already. Every
answer (or refusal) and every table of the two files must be the same, row for row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from observation_rows_support import every_table

from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import (
    ConversationSettings,
    RunFields,
    closing_payload,
    turn_record,
    user_payload,
)
from neotoma_agent.transport._results import StoreResult
from neotoma_agent.transport.embedded import EmbeddedStore, _type_plan, _write
from neotoma_agent.transport.embedded._name_index import SEARCH_FIELDS

Store = tuple[tuple[Mapping[str, Any], ...], str, tuple[Mapping[str, Any], ...], bool]

_NOW = "2026-01-02T03:04:05.678Z"


@contextlib.contextmanager
def _plan(on: bool) -> Iterator[list[int]]:
    """The store's clock fixed; the plan as it is, or never taken. Yields the count of
    elements the plan wrote."""
    made = [0]
    inner = _type_plan.write_new

    def counted(*args: Any) -> Any:
        answer = inner(*args) if on else None
        made[0] += answer is not None
        return answer

    with (
        mock.patch.object(_write, "now_iso", return_value=_NOW),
        mock.patch.object(_write, "write_new", counted),
    ):
        yield made


def _answer(result: StoreResult, body: bool) -> tuple[Any, ...]:
    entries = tuple(
        (
            e.entity_id,
            e.entity_type,
            e.observation_id,
            e.observation_index,
            e.action,
            e.canonical_name,
            e.snapshot,
        )
        for e in result.entities
    )
    head = (result.replayed, result.source_id, result.entities_created)
    return (*head, result.observations_created, entries, dict(result.raw) if body else None)


async def _run(path: Path, stores: Sequence[Store], user: str | None, on: bool) -> list[Any]:
    answers: list[Any] = []
    with _plan(on) as made:
        async with EmbeddedStore.open(path) as store:
            view: Any = store if user is None else store.for_user(user)
            for entities, key, relationships, body in stores:
                try:
                    if body:
                        result = await view.store(
                            entities, idempotency_key=key, relationships=relationships
                        )
                    else:
                        result = await view._store_records(
                            entities, idempotency_key=key, relationships=relationships
                        )
                    answers.append(_answer(result, body))
                except Exception as exc:  # a refusal: the same either way
                    answers.append((type(exc), str(exc)))
    answers.append(made[0])
    return answers


def _same_both_ways(tmp: Path, stores: Sequence[Store], user: str | None) -> int:
    """Run ``stores`` on two files, with and without the plan: the elements it wrote."""
    planned = anyio.run(_run, tmp / "plan.db", stores, user, True)
    general = anyio.run(_run, tmp / "general.db", stores, user, False)
    assert general[-1] == 0
    assert planned[:-1] == general[:-1]
    assert every_table(tmp / "plan.db") == every_table(tmp / "general.db")
    return int(planned[-1])


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_TIME = st.sampled_from([None, _NOW, "2026-01-02T03:04:05Z", "2026-01-02", "not a time", ""])
_ODD = st.one_of(
    st.none(),
    _TEXT,
    st.integers(-3, 3),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def _turns(draw: st.DrawFn) -> list[Store]:
    """Stores of a few turns, as the turn machine builds their payloads."""
    conversation = draw(st.sampled_from(["c1", "chat:2", "ünï côñv", "a b"]))
    conf = ConversationSettings(platform=draw(st.none() | _TEXT), title=draw(st.none() | _TEXT))
    stores: list[Store] = []
    for _ in range(draw(st.integers(1, 3))):
        try:
            keys = turn_keys(conversation, draw(st.sampled_from(["t1", "t2", "t 3", "ünï"])))
        except ValueError:
            continue
        started = draw(_TIME)
        run = RunFields(started_at=started)
        number = draw(st.none() | st.integers(-2, 3))
        extra = draw(
            st.none()
            | st.dictionaries(st.sampled_from(["reporter_channel", "odd", "title"]), _TEXT)
        )
        model = draw(st.none() | _TEXT)
        try:
            enter = user_payload(
                conf,
                keys,
                draw(_TEXT),
                turn_number=number,
                user_extra=extra,
                model=model,
                run=run,
            )
            close = closing_payload(
                conf,
                keys,
                draw(_TEXT),
                conversation_entity_id=None,
                user_message_id=None,
                turn_number=number,
                model=model,
                run=RunFields(started_at=started, ended_at=draw(_TIME)),
                started_at=started,
            )
        except (TypeError, ValueError):
            continue
        for payload in (enter, close):
            store = (
                payload.entities,
                payload.idempotency_key,
                payload.relationships,
                draw(st.booleans()),
            )
            stores.append(store)
            if draw(st.integers(0, 4)) == 0:
                stores.append(store)  # a retry: replayed
    # A turn record opened and closed in one store, as an import writes it.
    try:
        keys = turn_keys(conversation, "t9")
        record = turn_record(keys, "completed", harness=draw(st.none() | _TEXT), run=run)
        stores.append(((record,), "import-t9", (), True))
    except (TypeError, ValueError):
        pass
    return stores


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_turns(), st.sampled_from([None, "alice"]))
def test_turns_are_stored_the_same_with_the_plan_or_without(
    tmp_path_factory: pytest.TempPathFactory, stores: list[Store], user: str | None
) -> None:
    assume(stores)
    _same_both_ways(tmp_path_factory.mktemp("turns"), stores, user)


_MESSAGE_KEYS = ["role", "sender_kind", "content", "turn_key", "turn_number", "name", "_deleted"]
_TURN_KEYS = ["session_id", "turn_id", "turn_key", "status", "started_at", "model", "title"]


@st.composite
def _odd_stores(draw: st.DrawFn) -> list[Store]:
    """Stores of a message and a turn record of any fields, in any order."""
    stores: list[Store] = []
    for i in range(draw(st.integers(1, 4))):
        message = {
            "entity_type": "conversation_message",
            **draw(st.dictionaries(st.sampled_from(_MESSAGE_KEYS), _ODD | _TEXT, max_size=6)),
        }
        if draw(st.booleans()):
            message.update(
                role=draw(st.sampled_from(["user", "assistant", "tool", "other", ""])),
                sender_kind=draw(st.sampled_from(["user", "assistant", "bot"])),
                content=draw(_TEXT),
                turn_key=draw(st.sampled_from(["c:t1", "c:t1:assistant", "c:t2", ""])),
            )
        record = {
            "entity_type": "conversation_turn",
            **draw(st.dictionaries(st.sampled_from(_TURN_KEYS), _ODD | _TEXT, max_size=6)),
        }
        entities: list[Mapping[str, Any]] = [
            {"entity_type": "conversation", "conversation_id": "c"},
            message,
            record,
        ]
        if draw(st.booleans()):
            entities.append(dict(message))  # named twice in one store
        part_of = ({"relationship_type": "PART_OF", "source_index": 1, "target_index": 0},)
        stores.append((tuple(entities), f"k{i % 3}", part_of, draw(st.booleans())))
    return stores


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_odd_stores(), st.sampled_from([None, "bob"]))
def test_any_message_or_turn_record_is_stored_the_same_with_the_plan_or_without(
    tmp_path_factory: pytest.TempPathFactory, stores: list[Store], user: str | None
) -> None:
    _same_both_ways(tmp_path_factory.mktemp("odd"), stores, user)


def test_a_turns_new_entities_take_the_plan(tmp_path: Path) -> None:
    # Two messages and a turn record a turn; the plan's shapes hold no searched field.
    keys = turn_keys("c1", "t1")
    enter = user_payload(ConversationSettings(platform="cli"), keys, "hello", model="m")
    close = closing_payload(
        ConversationSettings(),
        keys,
        "hi",
        conversation_entity_id=None,
        user_message_id=None,
        run=RunFields(started_at=_NOW),
    )
    stores = [
        (enter.entities, enter.idempotency_key, enter.relationships, False),
        (close.entities, close.idempotency_key, close.relationships, True),
    ]
    assert _same_both_ways(tmp_path, stores, None) == 3
    for shape in _type_plan.SHAPES.values():
        assert set(SEARCH_FIELDS).isdisjoint(shape)
