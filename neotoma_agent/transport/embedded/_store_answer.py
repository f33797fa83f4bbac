"""A fresh ``store``'s answer, the server's JSON: made from what the store wrote.

:func:`._write.write` writes; this makes ``POST /store``'s answer of it (each entry with
its resolver path and snapshot, the advisories, the conversation's message count). A
turn's records path (:mod:`._turn_write`) answers from the same write without it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

from ..._neotoma.identity import Identity, schema_for
from . import _scope
from ._derived_restatement import replayed
from ._id_prefix import id_is
from ._key_digest import key_list, stored_sources
from ._key_rows import key_seqs
from ._part_of import edges
from ._reducer import SnapshotState
from ._rows import encode_entity, load_state
from ._warnings import Advisories, advise

__all__ = ["Planned", "Written", "answer", "answer_json", "message_count", "replay"]


class Planned(Protocol):
    """One request element as the write planned it (``_write``'s plan of it)."""

    @property
    def index(self) -> int: ...
    @property
    def entity_type(self) -> str: ...
    @property
    def fields(self) -> dict[str, Any]: ...
    @property
    def identity(self) -> Identity: ...
    @property
    def exists(self) -> bool: ...
    @property
    def action(self) -> str: ...
    @property
    def state(self) -> SnapshotState | None: ...
    @property
    def message_count(self) -> int: ...


class Written(NamedTuple):
    """What a fresh ``store`` wrote, before any answer is made of it."""

    source_id: str
    priority: int
    #: entities created (or extended)
    created: int
    #: each planned element, in plan order: its plan, observation id and snapshot after
    entries: Sequence[tuple[Planned, str, dict[str, Any] | None]]
    #: the relationships created, as the answer lists them
    edges: list[dict[str, Any]]
    #: new PART_OF edges per conversation (what the message count adds)
    counts: dict[str, int]


def answer(conn: sqlite3.Connection, written: Written) -> dict[str, Any]:
    """``POST /store``'s answer to the fresh store ``written`` (read in its transaction)."""
    return answer_json(written, message_count(conn, written))


def message_count(conn: sqlite3.Connection, written: Written) -> int | None:
    """The ``conversation_message_count`` of the answer to ``written`` (``None``: the
    answer has none), read in its transaction: what its answer needs of the file."""
    if not any(item.entity_type == _MESSAGE for item, _, _ in written.entries):
        return None  # only a store that carries a message reports the count
    planned = [item for item, _, _ in written.entries]
    return _conversation_message_count(conn, planned, written.counts)


def answer_json(written: Written, count: int | None) -> dict[str, Any]:
    """``POST /store``'s answer to the fresh store ``written``, whose message count is
    ``count`` (:func:`message_count`): made of what the store wrote, with no read."""
    priority, advisories = written.priority, Advisories()
    out_entities: list[dict[str, Any]] = []
    for item, obs_id, snapshot in written.entries:
        ident = item.identity
        entity_type, entity_id, index = item.entity_type, ident.entity_id, item.index
        # Positional: keyword arguments cost their matching on every entry of every store.
        advise(
            advisories,
            index,
            entity_type,
            entity_id,
            item.fields,
            schema_for(entity_type),
            priority,
        )
        out_entities.append(
            {
                "entity_id": entity_id,
                "entity_type": entity_type,
                "observation_id": obs_id,
                "observation_index": index,
                "action": item.action,
                "canonical_name": ident.canonical_name,
                "resolver_path": [
                    *ident.resolver_path,
                    _MATCHED if item.exists else _NONE,
                ],
                "identity_basis": ident.identity_basis,
                "identity_rule": ident.identity_rule,
                "entity_snapshot_after": snapshot,
            }
        )
    response: dict[str, Any] = {
        "success": True,
        "replayed": False,
        "commit": True,
        "source_id": written.source_id,
        "entities_created": written.created,
        "observations_created": len(written.entries),
        "entities": out_entities,
        "relationships_created": written.edges,
    }
    advisories.add_to(response)
    if count is not None:
        response["conversation_message_count"] = count
    return response


#: the last step of an entry's resolver path
_MATCHED: Final = "existing_row:matched"
_NONE: Final = "existing_row:none"
_MESSAGE: Final = "conversation_message"


def _conversation_message_count(
    conn: sqlite3.Connection, planned: Sequence[Planned], counts: Mapping[str, int]
) -> int | None:
    # Like the server, only a store that carries a message reports the count (samples f3, f5).
    if not any(p.entity_type == "conversation_message" for p in planned):
        return None
    conversation: str | None = None
    for item in planned:
        if item.entity_type == "conversation":
            # Its count was read with its row: add this store's new messages, no read.
            if not item.exists or item.state is not None:
                return item.message_count + counts.get(item.identity.entity_id, 0)
            conversation = item.identity.entity_id
            break
    if conversation is None and counts:
        conversation = next(iter(counts))
    if conversation is None:
        message = next(p for p in planned if p.entity_type == "conversation_message")
        sub, params = edges(source=message.identity.entity_id, rtypes=["PART_OF"], scoped=False)
        row = conn.execute(
            f"SELECT r.target_entity_id FROM ({sub}) r JOIN entities e "
            f"ON {id_is('entity_key(r.target_entity_id)', 'e.id')} "
            "WHERE e.entity_type = 'conversation' "
            f"AND {_scope.owned('e')} ORDER BY r.target_entity_id LIMIT 1",
            params,
        ).fetchone()
        if row is None:
            return None
        conversation = str(row[0])
    row = conn.execute(
        f"SELECT message_count FROM entities WHERE {id_is('?1')} AND {_scope.owned()}",
        (encode_entity(conversation),),
    ).fetchone()
    return int(row[0]) if row else 0


def replay(conn: sqlite3.Connection, source_id: str, key: str) -> dict[str, Any]:
    """A replayed store's answer (its key seen with the same source id): what the key's
    observations hold now, nothing written."""
    entries = []
    seqs = key_seqs(key_list(conn, key))
    # (the key's source tells an entity row's first and its close apart: ``_close_row``)
    source = stored_sources(conn, [key]).get(key) if any(s < 0 for s in seqs) else None
    for entity_id, entity_type, obs_id in replayed(conn, seqs, source):
        state = load_state(conn, entity_id)
        entries.append(
            {
                "entity_id": entity_id,
                "entity_type": entity_type,
                "observation_id": obs_id,
                "entity_snapshot_after": dict(state.fields) if state else None,
                "deduplicated": True,
            }
        )
    return {
        "success": True,
        "replayed": True,
        "source_id": source_id,
        "entities_created": 0,
        "observations_created": len(entries),
        "entities": entries,
    }
