"""An entity row's first observation's id derived, not stored, where it is derivable (a
schema step: ``DERIVED_FIRST_IDS``).

The id of an observation the store makes is the digest of its source, its entity and its
fields' JSON (``_new_rows.observation_id``). An entity row holds its first observation
(``_first``): its source is ``first_source``, its entity the row's id and its fields
``first_fields`` (in the field codec or not), or the snapshot's "f" where it shares them.
Where the digest of those, as :func:`fields_text` gives them back, is the id, the row
stores :data:`DERIVED` (an empty blob: no byte, as NULL, which says the row holds no
first observation) in ``first_id``, not the id's 16 bytes; every read of the id derives
it (:func:`first_id_sql`: one digest an answered observation, in SQL through the function
``first_obs_id``). Any other id is kept: one the caller gave (``correct``'s, a derived
edge's), a row an older version wrote from other JSON (``_first.merge_first``), a text id.

What keeps the fields' text the same for the row's life: a new row's first observation is
derivable by construction (its ``first_fields`` are its JSON or code it exactly; shared,
its JSON is ``dumps`` of the snapshot's fields, which the codec gives back exactly), and
every later write gives the first observation its fields back as that same text
(``_shared_fields.settle_fields``: ``dumps`` of the snapshot's fields it shared) or codes
them again under a new name (``_codec.renamed``: the same text decoded).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Final

from ..._neotoma.js import compact_encoder
from ._codec import decode_fields
from ._ids import decode_id, observation_id

__all__ = [
    "DERIVED",
    "DERIVED_FIRST_IDS",
    "derive_ids",
    "derived",
    "fields_text",
    "first_id_sql",
    "forget_memo",
    "install",
]

#: what ``first_id`` holds where the id is derived
DERIVED: Final = b""

_raw_decode = json.JSONDecoder().raw_decode
# The same text as ``_rows.dumps_acyclic`` (what a snapshot's "f" is written as).
_dumps = compact_encoder(allow_nan=True, check_circular=False)

#: the migration's script (:func:`derive_ids` runs right after it)
DERIVED_FIRST_IDS: Final = """
-- a first observation's id derived from its row where it is the digest (_first_id)
"""


def fields_text(first_fields: str | None, doc: str | None, name: str | None) -> str:
    """The JSON text of an entity row's first observation's fields: ``first_fields``
    (decoded from the field codec), else its snapshot doc's "f" (``doc``: the row's
    ``snapshot``; ``name``: its canonical name), as ``dumps`` writes them."""
    if first_fields is not None:
        if not first_fields.startswith("["):
            return first_fields
        return _dumps(decode_fields(json.loads(first_fields), name))
    if doc is None:
        raise ValueError("a first observation shares the snapshot's fields: none given")
    value = _raw_decode(doc, 5)[0]  # a doc is '{"f":' and its fields first (encode_state)
    return _dumps(decode_fields(value, name) if type(value) is list else value)


# Memoised: a conversation's row is read at every turn's stores, its first observation's
# fields unchanged (its snapshot, which changes, is passed only where they are its "f").
@functools.lru_cache(maxsize=256)
def derived(
    source: str | bytes | None,
    entity: str | bytes,
    first_fields: str | None,
    doc: str | None,
    name: str | None,
) -> bytes | str:
    """The id (as rows hold it: 16 bytes) of an entity row's first observation, from its
    ``first_source``, ``id``, ``first_fields``, ``snapshot`` (needed only where
    ``first_fields`` is NULL) and ``canonical_name``."""
    text = fields_text(first_fields, doc, name)
    # (``_rows.decode_entity``: this module is below ``_rows``, whose FIRST_META reads it)
    entity_id = "ent_" + entity.hex() if isinstance(entity, bytes) else entity
    return observation_id(decode_id(source), entity_id, text)[1]


def forget_memo() -> None:
    """Empty :func:`derived`'s memo, whose keys hold the fields' text of the rows it read (a
    purge's erasure leaves none of it in the process)."""
    derived.cache_clear()


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function ``first_obs_id`` (:func:`first_id_sql`)."""
    conn.create_function("first_obs_id", 5, derived, deterministic=True)


def first_id_sql(table: str = "") -> str:
    """SQL for an entity row's first observation's id as rows hold it (the stored
    ``first_id``, or derived where it is :data:`DERIVED`); ``table``: the row's alias."""
    t = f"{table}." if table else ""
    return (
        f"(CASE {t}first_id WHEN x'' THEN first_obs_id({t}first_source, {t}id, {t}first_fields, "
        f"CASE WHEN {t}first_fields IS NULL THEN {t}snapshot END, {t}canonical_name) "
        f"ELSE {t}first_id END)"
    )


def derive_ids(conn: sqlite3.Connection) -> None:
    """The migration's step: every first observation's id that is the digest of what its
    row gives back stored as :data:`DERIVED`, in one statement (a row whose fields do not
    decode, or that its name does not derive, keeps its id)."""
    conn.create_function("first_id_or_null", 5, _or_null, deterministic=True)
    conn.execute(
        "UPDATE entities SET first_id = x'' WHERE typeof(first_id) = 'blob' "
        "AND length(first_id) = 16 "
        "AND first_id_or_null(first_source, id, first_fields, snapshot, canonical_name) "
        "= first_id"
    )


def _or_null(
    source: str | bytes | None,
    entity: str | bytes,
    first_fields: str | None,
    doc: str | None,
    name: str | None,
) -> bytes | str | None:
    try:
        return derived(source, entity, first_fields, doc, name)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # (NameNeeded is a ValueError; JSONDecodeError too)
