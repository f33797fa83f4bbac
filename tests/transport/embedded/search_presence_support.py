"""The order of a search's hits since the search index keeps no positions (schema 29,
``_search_detail``): shorter texts first (a text's length in words, the index's), equal
lengths in the order of their entity rows; the score a function of the length alone."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from typing import Any

__all__ = ["in_presence_order", "length", "without_scores"]


def length(text: str) -> int:
    """``text``'s length in words as the index counts them (its own tokenizer, on a table
    of its own: its Unicode tables are not Python's)."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(
            "CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')"
        )
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        conn.execute("INSERT INTO t (rowid, text) VALUES (1, ?)", (text,))
        return int(conn.execute("SELECT count(*) FROM v").fetchone()[0])


def in_presence_order(hits: list[Mapping[str, Any]], rowids: Mapping[str, int]) -> bool:
    """Whether ``hits`` (a search's JSON) come shortest first, ties by entity row, each
    score below the one before it where the text is longer, equal where it is as long."""
    keys = [(length(h["text"]), rowids[h["entity_id"]]) for h in hits]
    return all(a < b for a, b in itertools.pairwise(keys)) and all(
        (a["score"] > b["score"]) if ka[0] < kb[0] else (a["score"] == b["score"])
        for (a, ka), (b, kb) in itertools.pairwise(zip(hits, keys, strict=True))
    )


def without_scores(hits: list[Mapping[str, Any]]) -> list[str]:
    """The hits but for their scores, in a fixed order (a set: what they are, not where)."""
    return sorted(json.dumps({**h, "score": None}, sort_keys=True) for h in hits)
