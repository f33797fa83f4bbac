"""Which observation row holds its fields, and which shares its entity's snapshot's.

One observation per entity may be stored without its fields (NULL) while they are exactly
its snapshot's "f" (``_rows``: the snapshot names it, "s"): a message written once, a turn
record's close that restates it whole. :func:`fields_column` is what a new observation's row
holds before its fold, :func:`settle_fields` sets the rows right after it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from ._close_row import CLOSE_SEQ
from ._codec import encode_fields
from ._first import FIRST_SEQ, set_fields
from ._reducer import SnapshotState
from ._rows import dumps_acyclic

__all__ = ["fields_column", "settle_fields"]


def fields_column(
    state: SnapshotState | None, fields_json: str, fields: Mapping[str, Any] | None = None
) -> str | None:
    """What a new observation's row holds in ``fields`` before the fold: NULL where it is
    likely to share the snapshot's after it, else its fields (:func:`settle_fields` then
    sets the row right either way, so a wrong guess costs an UPDATE, never a wrong row).

    Likely: nothing shares yet; or ``fields`` (the observation's) restate every field of
    the snapshot, changed (a turn record's close), so that it wins them all."""
    if state is None or state.shared is None:
        return None
    if fields is not None and state.fields.keys() <= fields.keys() and fields != state.fields:
        return None
    return fields_json


def settle_fields(
    conn: sqlite3.Connection,
    state: SnapshotState,
    old_fields: Mapping[str, Any],
    seq: float,
    fields_json: str,
    stored: str | None,
    changed: bool = True,
    entity_id: str = "",
    entity_type: str = "",
    name: str | None = None,
) -> str:
    """After folding observation ``seq`` (whose row holds ``stored``) into ``state``: give
    the old sharer its fields back if "f" changed, then share ``seq``'s or store them.
    Returns ``dumps(state.fields)`` (for :func:`encode_state`). ``changed=False``: the
    fold left "f" as it was (``_reducer.fold``), so it is not compared as JSON. The entity
    row's first observation gets them back in the field codec (``_codec``: of
    ``entity_type``, the row's ``name``)."""
    text = dumps_acyclic(state.fields)  # fields the store parsed or checked: never circular
    if state.shared is not None and changed:
        old_text = dumps_acyclic(old_fields)
        if old_text != text:
            mark = True
            if state.shared in (FIRST_SEQ, CLOSE_SEQ):  # (the entity row's: coded)
                old_text = encode_fields(entity_type, old_fields, old_text, name, exact=True)
            if state.shared == FIRST_SEQ:
                # Its rows, which a row restating them would be marked among: with two
                # observations (the row's first and ``seq``) only ``seq``'s, which holds
                # ``stored`` (a turn record's close: NULL, it shares the snapshot's).
                mark = state.observation_count != 2 or stored == old_text
            set_fields(conn, entity_id, state.shared, old_text, mark)
            state.shared = None
    if state.shared is None and fields_json == text:
        state.shared = seq
        if stored is not None:
            set_fields(conn, entity_id, seq, None)
    elif stored is None and seq == CLOSE_SEQ:  # (a turn record's close in its row: coded)
        coded = encode_fields(entity_type, json.loads(fields_json), fields_json, name)
        set_fields(conn, entity_id, seq, coded)
    elif stored is None:
        set_fields(conn, entity_id, seq, fields_json)
    return text
