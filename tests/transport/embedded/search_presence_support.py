"""The order of a search's hits since the search index keeps no positions (schema 29,
``_search_detail``): shorter texts first (a text's length in words, the index's), equal
lengths in the order of their entity rows; the score a function of the length alone."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from neotoma_agent._recall.search_text import words

__all__ = ["in_presence_order", "without_scores"]


def in_presence_order(hits: list[Mapping[str, Any]], rowids: Mapping[str, int]) -> bool:
    """Whether ``hits`` (a search's JSON) come shortest first, ties by entity row, each
    score below the one before it where the text is longer, equal where it is as long."""
    keys = [(len(words(h["text"])), rowids[h["entity_id"]]) for h in hits]
    return all(a < b for a, b in itertools.pairwise(keys)) and all(
        (a["score"] > b["score"]) if ka[0] < kb[0] else (a["score"] == b["score"])
        for (a, ka), (b, kb) in itertools.pairwise(zip(hits, keys, strict=True))
    )


def without_scores(hits: list[Mapping[str, Any]]) -> list[str]:
    """The hits but for their scores, in a fixed order (a set: what they are, not where)."""
    return sorted(json.dumps({**h, "score": None}, sort_keys=True) for h in hits)
