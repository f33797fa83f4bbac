"""A search query as plain text (``_recall.search_text``): no text is an operator, and the Python
matcher (a store without an index) agrees with the FTS5 index on what matches."""

from __future__ import annotations

import re
import sqlite3
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent import EmptySearchQueryError
from neotoma_agent._recall.search_text import fts_query, matches, parse_query, words

#: what ``fts_query`` may write: phrases in double quotes, of words and single spaces
PHRASE = re.compile(r'"([^"\s]+(?: [^"\s]+)*)"')


def _safe(written: str) -> bool:
    """Phrases in double quotes, one space apart, each word holding a letter or a digit and
    nothing but letters, digits and combining marks."""
    phrases = PHRASE.findall(written)
    if " ".join(f'"{p}"' for p in phrases) != written:
        return False
    return all(
        any(c.isalnum() for c in word)
        and all(c.isalnum() or unicodedata.category(c)[0] == "M" for c in word)
        for phrase in phrases
        for word in phrase.split(" ")
    )


def _index(*texts: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')"
    )
    conn.executemany("INSERT INTO t (text) VALUES (?)", [(t,) for t in texts])
    return conn


def _fts_finds(conn: sqlite3.Connection, query: str) -> bool:
    phrases = parse_query(query)
    if not phrases:
        return False
    return (
        conn.execute("SELECT 1 FROM t WHERE t MATCH ?", (fts_query(phrases),)).fetchone()
        is not None
    )


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=400))
def test_no_text_is_an_operator(query: str) -> None:
    try:
        phrases = parse_query(query)
    except EmptySearchQueryError:
        assert not query.strip()
        return
    if phrases:
        written = fts_query(phrases)
        assert _safe(written), written
        _index("some text").execute("SELECT 1 FROM t WHERE t MATCH ?", (written,)).fetchall()


# Words with accents, capitals, digits and the separators people type.
_WORD = st.text(st.sampled_from("abcdeéèçñüøßAÉÑ0123"), min_size=1, max_size=6)
_SEP = st.sampled_from([" ", "-", ", ", ". ", "'", "/", ":", "\n", "(", ") "])


@st.composite
def _text(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(_WORD, _SEP), min_size=1, max_size=12))
    return "".join(w + s for w, s in parts)


@settings(max_examples=300, deadline=None)
@given(text=_text(), query=st.one_of(_WORD, _text()), quoted=st.booleans())
def test_the_python_matcher_agrees_with_the_index(text: str, query: str, quoted: bool) -> None:
    if quoted:
        query = f'"{query}"'
    try:
        phrases = parse_query(query)
    except EmptySearchQueryError:
        return
    python = bool(phrases) and all(matches(words(text), phrases))
    assert python == _fts_finds(_index(text), query), (text, query)


@pytest.mark.parametrize(
    ("text", "query", "found"),
    [
        ("María de la Cruz", "maria", True),
        ("María de la Cruz", '"de la cruz"', True),
        ("María de la Cruz", '"cruz la"', False),
        ("OPS-412: rotate", "ops-41", False),
        ("OPS-412: rotate", "OPS 412", True),
        ("Crème brûlée", "creme brulee", True),
        ("cre\u0300me", "creme", True),  # a decomposed accent is part of its word
    ],
)
def test_examples(text: str, query: str, found: bool) -> None:
    assert _fts_finds(_index(text), query) is found
    assert all(matches(words(text), parse_query(query))) is found
