"""The search index without positions (``_search_detail``). What matters: the index keeps
whether a text holds a word and its length, not where (its postings about half as many
bytes); a search finds the hits version 28 found (a phrase's words next to each other, in
order, checked on the texts, up to the limit), shortest first with a presence BM25 score;
a version-28 file (``tests/data/v28_store``) upgrades to it and is written on; every read
answers as on the file the version before held, upgraded."""

from __future__ import annotations

import math
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from file_workload_support import (
    Step,
    compared,
    same_on_both,
    steps,
    turn_on_recorded,
    write_steps,
)
from hypothesis import given
from hypothesis import strategies as st
from paths_support import TESTS
from recorder_support import recorder
from search_detail_support import PRESENCE, declaration, positioned_hits
from search_presence_support import in_presence_order, without_scores
from version_copy_support import copy_at_version

from neotoma_agent import EmbeddedStore
from neotoma_agent._recall.search_text import words
from neotoma_agent.transport.embedded import _schema
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION
from neotoma_agent.transport.embedded._search_detail import SEARCH_PRESENCE

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

#: the version before the step
BEFORE = PRESENCE - 1


async def _notes(path: Path, texts: list[str]) -> list[str]:
    """Each text as a person's ``notes`` (its text: its name, then its notes); their ids."""
    ids = []
    async with EmbeddedStore.open(path) as store:
        for n, text in enumerate(texts):
            result = await store.store(
                [{"entity_type": "person", "name": f"n{n}", "notes": text}],
                idempotency_key=f"note-{n}",
            )
            ids.append(result.entities[0].entity_id)
    return ids


def _rowids(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            str(e): int(r)
            for e, r in conn.execute(f"SELECT {entity_text('id')}, rowid FROM entities")
        }


async def _search(path: Path, q: str, **extra: Any) -> list[dict[str, Any]]:
    async with EmbeddedStore.open(path) as store:
        hits: list[dict[str, Any]] = (await store.request("text_search", {"q": q, **extra}))["hits"]
    return hits


def _data_bytes(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT sum(payload) FROM dbstat WHERE name = 'search_text_data'")
        return int(row.fetchone()[0])


def _sizes(path: Path) -> list[tuple[int, bytes]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, sz FROM search_text_docsize ORDER BY id").fetchall()


async def test_the_index_keeps_each_texts_words_and_length_not_their_positions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await _notes(path, [f"the budget for project {n} and the team of {n % 7}" for n in range(200)])
    assert "detail = none" in declaration(path)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    assert "detail" not in declaration(old)
    assert _sizes(old) == _sizes(path)  # each text's length: kept as it was
    assert _data_bytes(path) < 0.75 * _data_bytes(old)


async def test_hits_come_shortest_first_scored_by_presence_bm25(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    texts = ["budget budget budget budget", "budget", "a budget here", "other words", "budget"]
    ids = await _notes(path, texts)
    hits = await _search(path, "budget")
    # a word counts once: the repeated one is as good as its length says
    assert [h["entity_id"] for h in hits] == [ids[1], ids[4], ids[2], ids[0]]
    assert in_presence_order(hits, _rowids(path))
    lengths = [len(words(t)) + 1 for t in texts]  # (each person's name: one word more)
    documents, mean, holding = len(texts), sum(lengths) / len(texts), 4
    idf = math.log((documents - holding + 0.5) / (holding + 0.5))
    idf = max(idf, 1e-6)  # (FTS5's floor: a word in most texts weighs next to nothing)
    for hit, n in zip(hits, (1, 4, 2, 0), strict=True):
        expected = idf * 2.2 / (1 + 1.2 * (0.25 + 0.75 * lengths[n] / mean))
        assert hit["score"] == pytest.approx(expected)
    assert [h["entity_id"] for h in await _search(path, "budget", limit=2)] == ids[1::3]


async def test_a_phrase_finds_its_hits_up_to_the_limit_past_texts_holding_its_words(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    loose = [f"budget the {n}" for n in range(30)]  # every word, not as the phrase: shorter
    held = ["the budget is final now", "we checked the budget twice today", "the, budget!"]
    ids = await _notes(path, loose + held)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    for limit in (1, 2, 3, 10):
        hits = await _search(path, '"the budget"', limit=limit)
        expected = [ids[-1], ids[-3], ids[-2]][:limit]
        assert [h["entity_id"] for h in hits] == expected, limit
    assert set(positioned_hits(old, '"the budget"')) == set(ids[-3:])
    assert len(await _search(path, "the budget", limit=100)) == 33


async def test_a_word_the_index_folds_or_cuts_is_found_as_version_28_found_it(
    tmp_path: Path,
) -> None:
    """The index's tokenizer folds ``ſ`` as ``s`` (Python keeps it) and cuts a word at a
    mark its Unicode tables do not know (U+093A, U+0305): a phrase is checked on the
    index's words, as version 28's positions matched it."""
    path = tmp_path / "store.db"
    texts = ["Meſſage sent today", "sent message", "0\u093a0 x", "0 0 x", "0 x", "a\u0305b c"]
    await _notes(path, texts)
    old = copy_at_version(path, tmp_path / "before.db", BEFORE)
    queries = ['"message sent"', "meſſage", '"0\u093a0"', "0\u093a0 x", '"0 0"', "\u093a"]
    for q in (*queries, '"a\u0305b c"', '"b c"', '"a b"'):
        found = {h["entity_id"] for h in await _search(path, q)}
        assert found == set(positioned_hits(old, q)), q
    assert len(await _search(path, '"message sent"')) == 1
    assert len(await _search(path, '"0\u093a0"')) == 2  # (0ऺ0 is 0 0: as in 0 0 x)


async def test_a_version_28_file_upgrades_to_the_index_without_positions(
    tmp_path: Path,
) -> None:
    """The file version 28 wrote (``tests/data/v28_store``): upgraded, its index keeps no
    positions, each recorded search (each user's: words, phrases, a conversation's, a
    limit) finds the same hits in the presence order, and it is written on."""
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v28_store" / "store.db", path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert "detail" not in declaration(path)
    recorded = recorder()
    async with EmbeddedStore.open(path) as store:
        got: dict[str, Any] = await recorded._searches(store)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "detail = none" in declaration(path)
    answers = recorded.json.loads((TESTS / "data" / "v28_store" / "answers.json").read_text())
    rowids = _rowids(path)
    assert list(got) == list(answers["searches"])
    for key, answer in answers["searches"].items():
        assert without_scores(got[key]["hits"]) == without_scores(answer["hits"]), key
        assert in_presence_order(got[key]["hits"], rowids), key
    await turn_on_recorded(path)
    async with EmbeddedStore.open(path) as store:
        [hit] = (await store.search('"acme again"')).hits
    assert hit.text == "Acme again."


async def test_an_upgrade_that_fails_midway_leaves_the_version_28_index_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(TESTS / "data" / "v28_store" / "store.db", path)
    before = _sizes(path)

    def fail(conn: sqlite3.Connection) -> None:
        raise OSError("the disk went away")

    monkeypatch.setitem(_schema._AFTER, SEARCH_PRESENCE, fail)
    with pytest.raises(OSError, match="the disk went away"):
        async with EmbeddedStore.open(path):
            pass
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    assert "detail" not in declaration(path)
    assert _sizes(path) == before
    monkeypatch.undo()
    async with EmbeddedStore.open(path):
        pass
    assert _sizes(path) == before


#: the words texts are made of: a few common, accented and folded alike, one cut in two
_WORDS = ["the", "budget", "Budget", "team", "café", "cafe", "Søren", "soren", "0\u093a0", "x"]
_TEXT = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8).map(" ".join)


@st.composite
def _queries(draw: st.DrawFn, texts: list[str]) -> str:
    """A query drawn from a written text: some of its words, a run of them as a phrase."""
    said = draw(st.sampled_from(texts)).split()
    start = draw(st.integers(0, len(said) - 1))
    run = said[start : start + draw(st.integers(1, 3))]
    loose = draw(st.lists(st.sampled_from(said), max_size=2))
    return " ".join([f'"{" ".join(run)}"' if draw(st.booleans()) else " ".join(run), *loose])


@compared
@given(data=st.data(), texts=st.lists(_TEXT, min_size=1, max_size=25))
async def test_every_search_finds_the_hits_version_28_found(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, texts: list[str]
) -> None:
    """Texts of common, accented and cut words; queries drawn from them (words, a phrase):
    the same hits as version 28's index found (its positions, its phrases), in the
    presence order, a limit keeping the first of them."""
    tmp = tmp_path_factory.mktemp("presence")
    path = tmp / "store.db"
    await _notes(path, texts)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    rowids = _rowids(path)
    for q in data.draw(st.lists(_queries(texts), min_size=1, max_size=5)):
        hits = await _search(path, q, limit=100)
        assert {h["entity_id"] for h in hits} == set(positioned_hits(old, q)), q
        assert in_presence_order(hits, rowids), q
        assert await _search(path, q, limit=2) == hits[:2], q


@compared
@given(before=steps, after=steps)
async def test_every_read_and_write_is_the_same_as_on_the_file_the_version_before_held(
    tmp_path_factory: pytest.TempPathFactory, before: list[Step], after: list[Step]
) -> None:
    """Any mix of two users' turns (tool calls, remembered entities), stores, corrections,
    deletions and restores, edges and forgotten users: every read of each user (searches
    included) answers the same on the file and on its copy as the version before held it,
    upgraded; then the same writes on both write the same rows and answer the same."""
    tmp = tmp_path_factory.mktemp("presence")
    path = tmp / "store.db"
    await write_steps(path, [("turn", 0, 0), *before], 0)
    old = copy_at_version(path, tmp / "before.db", BEFORE)
    await same_on_both(path, old, after, rows=[_sizes])
