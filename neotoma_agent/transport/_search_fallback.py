"""Search over a store with no full-text index (a real Neotoma server): its reads, then ranking.

A real Neotoma 0.22.0 server has no ``GET /text_search``. What it has:

- ``GET /recent_conversations/{id}`` sends every message of one conversation: a search of one
  conversation reads them all and ranks them here, so it misses nothing;
- ``POST /entities/query`` with ``search``: a substring match of every word against the
  entity's canonical name and its snapshot as JSON, both lowercased with ``-`` and ``_`` as
  spaces and every other character but ASCII letters, digits and spaces removed. A search of
  every conversation asks it for messages (``entity_type: conversation_message``: every
  message is a candidate) and for other entities (no type: the server looks at its first
  5,000 entities by id only), reads at most :data:`MAX_CANDIDATES` answers of each, and keeps
  those that hold every word and phrase as whole words (:mod:`neotoma_agent._recall.search_text`),
  ranked by BM25 over the candidates read, each phrase counted once in a text (as the
  embedded store's index counts a word: the shorter text first).

A word with a letter outside ASCII is sent as its ASCII pieces (``María`` as ``Mar`` and ``a``),
which the server finds in ``María`` and ``Maria`` alike; but ``Maria`` is sent whole, and the
server, having removed the ``í`` of a stored ``María``, does not find it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .._recall.search_text import MESSAGE_TYPE as _MESSAGE
from .._recall.search_text import Phrase, check_search, doc_text, matches, parse_query, words
from .._records.keys import conversation_entity_id, parse_turn_key
from .._records.user_id import tenant_for
from ..exceptions import NotFoundError
from ._base import ConversationReader, SearchReader, Transport
from ._search_results import SearchHit, SearchHitKind, SearchResult

__all__ = ["MAX_CANDIDATES", "search", "search_without_index"]

#: the most answers read per kind (a server pages 500 at a time, offsets up to 2,000)
MAX_CANDIDATES: Final = 2500
_PAGE: Final = 500
# BM25's usual constants (FTS5's too)
_K1: Final = 1.2
_B: Final = 0.75
_ASCII_RUN: Final = re.compile(r"[A-Za-z0-9]+")


def server_search(phrases: Sequence[Phrase]) -> str:
    """The ``search`` text a server's substring match finds every candidate with."""
    pieces = [p for phrase in phrases for w in phrase for p in _ASCII_RUN.findall(w)]
    return " ".join(dict.fromkeys(p.lower() for p in pieces))


class _Doc:
    __slots__ = ("counts", "fields", "id", "length", "name", "text", "type")

    def __init__(
        self, entity_id: str, entity_type: str, name: str | None, fields: Mapping[str, Any]
    ) -> None:
        self.id = entity_id
        self.type = entity_type
        self.name = name
        self.fields = fields
        self.text = doc_text(entity_type, fields) or ""
        self.counts: list[int] = []
        self.length = 0


def _rank(docs: Iterable[_Doc], phrases: Sequence[Phrase]) -> list[tuple[float, _Doc]]:
    """The docs that hold every phrase, with their BM25 score over ``docs``, best first."""
    pool = [d for d in docs if d.text]
    for doc in pool:
        folded = words(doc.text)
        doc.length = len(folded)
        doc.counts = matches(folded, phrases)
    if not pool:
        return []
    n = len(pool)
    average = sum(d.length for d in pool) / n or 1.0
    frequency = [sum(1 for d in pool if d.counts[i]) for i in range(len(phrases))]
    idf = [math.log((n - f + 0.5) / (f + 0.5) + 1) for f in frequency]
    ranked = []
    for doc in pool:
        if not all(doc.counts):
            continue
        # each phrase counted once in a text (its presence), as the embedded store's index
        # counts a word (it keeps no positions): the shorter text ranks first
        score = sum(idf) * (_K1 + 1) / (1 + _K1 * (1 - _B + _B * doc.length / average))
        ranked.append((score, doc))
    ranked.sort(key=lambda pair: (-pair[0], pair[1].id))
    return ranked


def _hit(score: float, doc: _Doc, scope: str | None) -> SearchHit:
    if doc.type != _MESSAGE:
        return SearchHit(SearchHitKind.ENTITY, doc.id, doc.type, doc.text, score, name=doc.name)
    turn_key, role = doc.fields.get("turn_key"), doc.fields.get("role")
    parsed = parse_turn_key(turn_key, scope) if isinstance(turn_key, str) else None
    return SearchHit(
        SearchHitKind.MESSAGE,
        doc.id,
        doc.type,
        doc.text,
        score,
        conversation_id=scope or (parsed[0] if parsed else None),
        turn_id=parsed[1] if parsed else None,
        role=role if isinstance(role, str) else (parsed[2] if parsed else None),
    )


async def _conversation(reader: ConversationReader, conversation_id: str) -> list[_Doc]:
    try:
        entity_id = conversation_entity_id(conversation_id, tenant_for(reader))
        found = await reader.recent_conversation(entity_id)
    except NotFoundError:
        return []  # no such conversation (or forgotten)
    return [
        _Doc(
            m.message_id,
            _MESSAGE,
            None,
            {"content": m.content, "role": m.role, "turn_key": m.turn_key},
        )
        for m in found.messages
    ]


async def _matching(
    transport: Transport, search: str, entity_type: str | None
) -> tuple[list[_Doc], bool]:
    """The server's answers for ``search`` (at most MAX_CANDIDATES), and whether it had more."""
    docs: list[_Doc] = []
    offset = 0
    while offset < MAX_CANDIDATES:
        page = await transport.query_entities(
            entity_type=entity_type, search=search, limit=_PAGE, offset=offset
        )
        docs.extend(
            _Doc(e.entity_id, e.entity_type, e.canonical_name, e.snapshot) for e in page.entities
        )
        offset += _PAGE
        if len(page.entities) < _PAGE or page.total <= offset:
            return docs, False
    return docs, True


async def search_without_index(
    transport: Transport, query: str, *, limit: int, conversation_id: str | None
) -> SearchResult:
    """Search ``transport`` through its generic reads (see the module's docstring)."""
    phrases = parse_query(query)
    if not phrases:
        return SearchResult(())
    partial = False
    if conversation_id is not None and isinstance(transport, ConversationReader):
        try:
            docs = await _conversation(transport, conversation_id)
        except NotImplementedError:  # a wrapper over a transport without the read
            docs = None
        if docs is not None:
            ranked = _rank(docs, phrases)
            return SearchResult(tuple(_hit(s, d, conversation_id) for s, d in ranked[:limit]))
    search = server_search(phrases)
    if not search:
        return SearchResult(())
    messages, cut = await _matching(transport, search, _MESSAGE)
    partial |= cut
    docs = messages
    if conversation_id is None:
        others, cut = await _matching(transport, search, None)
        partial = partial or cut
        seen = {d.id for d in docs}
        docs += [d for d in others if d.id not in seen and d.type != _MESSAGE]
    else:
        docs = [d for d in docs if _in_conversation(d, conversation_id)]
    ranked = _rank(docs, phrases)
    return SearchResult(
        tuple(_hit(s, d, conversation_id) for s, d in ranked[:limit]), partial=partial
    )


def _in_conversation(doc: _Doc, conversation_id: str) -> bool:
    turn_key = doc.fields.get("turn_key")
    return isinstance(turn_key, str) and turn_key.startswith(f"{conversation_id}:")


async def search(
    transport: Transport, query: str, *, limit: int, conversation_id: str | None
) -> SearchResult:
    """Search through the transport's :class:`SearchReader` method when it has one (a
    wrapper over a transport without it says so), else through its generic reads."""
    query = check_search(query, limit)
    if conversation_id is not None and not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be a str, not {type(conversation_id).__name__}")
    if isinstance(transport, SearchReader):
        try:
            return await transport.search(query, limit=limit, conversation_id=conversation_id)
        except NotImplementedError:
            pass
    return await search_without_index(
        transport, query, limit=limit, conversation_id=conversation_id
    )
