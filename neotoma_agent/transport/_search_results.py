"""What a search answers: :class:`SearchResult`, one :class:`SearchHit` per message or entity.

The JSON shape is the ``POST /text_search`` route's (the embedded store and the dev server);
the fallback over a real Neotoma server's ``/entities/query`` builds the same records.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from .._recall.search_text import ENTITY_KIND, MESSAGE_KIND

__all__ = ["SEARCH_ACTION", "SearchHit", "SearchHitKind", "SearchResult"]

#: the REST action, ``POST /text_search`` (an extension: a real Neotoma server answers it 404;
#: a POST, so that a long query is not cut by a limit on the length of a URL)
SEARCH_ACTION = "text_search"


class SearchHitKind(str, enum.Enum):
    """What a hit is: a stored message, or an entity whose fields hold the words."""

    MESSAGE = MESSAGE_KIND
    ENTITY = ENTITY_KIND


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) else None


@attrs.frozen
class SearchHit:
    """One message or entity a search found.

    ``text``: a message's exact stored text, or an entity's text fields, one value a line.
    ``score``: how well it matches (BM25 with each word counted once: higher is better;
    compare scores within one search only). A message hit has ``message_id`` (its entity
    id), ``conversation_id``, ``turn_id`` and ``role`` (``"user"`` / ``"assistant"``) where
    the store holds them; an entity hit has ``name`` (its canonical name) and ``None`` for
    the four.
    """

    kind: SearchHitKind
    entity_id: str
    entity_type: str
    text: str
    score: float
    conversation_id: str | None = None
    turn_id: str | None = None
    role: str | None = None
    name: str | None = None

    @property
    def message_id(self) -> str | None:
        """The message's entity id (a message hit), else ``None``."""
        return self.entity_id if self.kind is SearchHitKind.MESSAGE else None

    def to_json(self) -> dict[str, Any]:
        """The route's JSON form of the hit (``message_id`` included)."""
        return {
            "kind": self.kind.value,
            "entity_id": self.entity_id,
            "entity_type": self.entity_type,
            "message_id": self.message_id,
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "role": self.role,
            "name": self.name,
            "text": self.text,
            "score": self.score,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SearchHit:
        """A hit from its JSON form."""
        score = raw.get("score")
        return cls(
            kind=SearchHitKind(raw.get("kind", MESSAGE_KIND)),
            entity_id=str(raw.get("entity_id", "")),
            entity_type=str(raw.get("entity_type", "")),
            text=str(raw.get("text", "")),
            score=float(score) if isinstance(score, int | float) else 0.0,
            conversation_id=_opt(raw.get("conversation_id")),
            turn_id=_opt(raw.get("turn_id")),
            role=_opt(raw.get("role")),
            name=_opt(raw.get("name")),
        )


@attrs.frozen
class SearchResult:
    """The answer to a search: ``hits``, best first.

    ``partial``: the store could not look at everything (a real Neotoma server's search
    stops at a number of candidates: see the search guide), so a hit may be missing.
    """

    hits: tuple[SearchHit, ...]
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        """The route's JSON form."""
        return {"hits": [h.to_json() for h in self.hits], "partial": self.partial}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SearchResult:
        """A result from the route's JSON."""
        hits = raw.get("hits")
        items = hits if isinstance(hits, list) else []
        return cls(
            tuple(SearchHit.from_json(h) for h in items if isinstance(h, Mapping)),
            partial=raw.get("partial") is True,
        )
