"""A turn's close finds its turn record's names among the rows it loaded (``_turn_names``):
whether its assistant message goes into the turn record's document is decided from the
``canonical_name`` and ``aliases`` the store read with the record's snapshot, where it was
decided by reading the row again. A rename in between only appends to the aliases, so the
first name, which decides, is the one loaded.

The same stores run on two files, one deciding from the loaded names and one reading the
row (as before), with the store's clock fixed: turns as the turn machine builds them,
messages and turn records of any fields (renamed by what their snapshots say), a turn
record renamed through its ``target_id`` between the enter and the close, and a user's view.
Every answer and every table of the two files must be the same, row for row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from observation_rows_support import every_table
from test_type_plan import Store, _answer, _odd_stores, _turns

from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import (
    ConversationSettings,
    RunFields,
    closing_payload,
    user_payload,
)
from neotoma_agent.transport.embedded import EmbeddedStore, _turn_names, _write

_NOW = "2026-01-02T03:04:05.678Z"
#: a store that renames the turn record the last store wrote (its ``target_id`` filled in)
RENAME = "rename"


@contextlib.contextmanager
def _loaded(on: bool) -> Iterator[list[int]]:
    """The store's clock fixed; the loaded names used, or never (the row read). Yields the
    count of the decisions the loaded names made."""
    made = [0]
    inner = _turn_names._has_turn_record

    def counted(conn: Any, name: str, turns: Any, loaded: Mapping[str, Any], tenant: Any) -> bool:
        made[0] += any(loaded.get(t) for t in turns.values()) if on else 0
        return inner(conn, name, turns, loaded if on else {}, tenant)

    with (
        mock.patch.object(_write, "now_iso", return_value=_NOW),
        mock.patch.object(_turn_names, "_has_turn_record", counted),
    ):
        yield made


async def _run(path: Path, stores: Sequence[Store | str], user: str | None, on: bool) -> list[Any]:
    answers: list[Any] = []
    record: str | None = None  # the id of the last turn record written
    with _loaded(on) as made:
        async with EmbeddedStore.open(path) as store:
            view: Any = store if user is None else store.for_user(user)
            for n, step in enumerate(stores):
                if step == RENAME:
                    if record is None:
                        continue
                    step = (
                        (
                            {
                                "entity_type": "conversation_turn",
                                "target_id": record,
                                "session_id": "renamed",
                                "turn_id": f"r{n}",
                            },
                        ),
                        f"rename-{n}",
                        (),
                        True,
                    )
                entities, key, relationships, body = step
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
                    turns = [e for e in result.entities if e.entity_type == "conversation_turn"]
                    if turns:
                        record = turns[-1].entity_id
                except Exception as exc:  # a refusal: the same either way
                    answers.append((type(exc), str(exc)))
    answers.append(made[0])
    return answers


def _same_both_ways(tmp: Path, stores: Sequence[Store | str], user: str | None) -> int:
    """Run ``stores`` on two files, deciding from the loaded names and from the row read
    again: the decisions the loaded names made."""
    loaded = anyio.run(_run, tmp / "loaded.db", stores, user, True)
    read = anyio.run(_run, tmp / "read.db", stores, user, False)
    assert read[-1] == 0
    assert loaded[:-1] == read[:-1]
    assert every_table(tmp / "loaded.db") == every_table(tmp / "read.db")
    return int(loaded[-1])


@st.composite
def _with_renames(draw: st.DrawFn, stores: st.SearchStrategy[list[Store]]) -> list[Store | str]:
    """``stores``, with a rename of the last turn record written after any of them."""
    out: list[Store | str] = []
    for store in draw(stores):
        out.append(store)
        if draw(st.integers(0, 3)) == 0:
            out.append(RENAME)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_renames(_turns()), st.sampled_from([None, "alice"]))
def test_turns_are_indexed_the_same_from_the_loaded_names_or_the_row(
    tmp_path_factory: pytest.TempPathFactory, stores: list[Store | str], user: str | None
) -> None:
    _same_both_ways(tmp_path_factory.mktemp("turns"), stores, user)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_renames(_odd_stores()), st.sampled_from([None, "bob"]))
def test_any_message_and_turn_record_are_indexed_the_same_either_way(
    tmp_path_factory: pytest.TempPathFactory, stores: list[Store | str], user: str | None
) -> None:
    _same_both_ways(tmp_path_factory.mktemp("odd"), stores, user)


@pytest.mark.parametrize("renamed", [False, True])
def test_a_turns_close_decides_from_the_loaded_names(tmp_path: Path, renamed: bool) -> None:
    # The close restates the turn record (loaded) and creates the assistant message: its
    # name derives from the record's first name, renamed since or not.
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
    stores: list[Store | str] = [
        (enter.entities, enter.idempotency_key, enter.relationships, False),
        *([RENAME] if renamed else []),
        (close.entities, close.idempotency_key, close.relationships, True),
    ]
    assert _same_both_ways(tmp_path, stores, None) == 1
