"""The fields of the protocol's own records in a positional codec (schema version 16).

A ``conversation_message`` or ``conversation_turn`` row's snapshot "f" (and a turn
record's ``first_fields``, its open state's fields) is stored as a JSON array: its type's
template code, then its values in the template's field order, with no names:

    [code, value, ...]          the fields are the template's first ones, in its order
    [-code, mask, value, ...]   the fields are the template's at the bits of ``mask``

Each field of a template has a transform: ``_PLAIN`` (the value as it is), ``_TIME``
(a canonical ISO time, as the store writes them, as integer milliseconds:
``_times.encode_time``; any other value keeps the fields' object), ``_WORDS`` (one
of a few words as its index: a message's role, a turn record's status), or a value
derived from the fields before it or the row's name, stored as ``0`` (a message's
``sender_kind`` equal to its role, its ``turn_key`` the rest of its canonical name
``conversation_message:<turn_key>``; a turn record's ``turn_key`` its session and turn ids).

Fields are coded only where decoding gives back exactly the same fields: the same keys in
the same order, the same JSON (:func:`encode_fields` decodes what it coded and compares the
texts); anything else (a field the template does not hold, another order, a time that is
not canonical, a value that reads as a marker) stays the JSON object it was, and every
reader takes both. A coded value derived from the name needs the row's name to decode:
every reader passes it, and a write of a type whose template derives one (``NAMED_TYPES``)
reads it (:func:`row_name`), so that a row's form depends on its type, fields and name
alone; a rename codes the row again (:func:`renamed`). The templates are part of the file
format: append only, and a template's fields and words too.

A turn record's ``first_fields`` use the same codec, not a delta against the snapshot's
fields: a delta would depend on a snapshot that later observations change (each would
rewrite it), to save a few bytes of an open state that codes to about 50.

SQL reads a coded doc's fields through the function ``codec_fields`` (:func:`install`, on
every connection): :func:`fields_sql` and :func:`field_sql` are the expressions to use where
a statement took ``$.f`` apart, and :func:`first_fields_sql` for ``first_fields``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._neotoma.js import compact_encoder
from ._id_prefix import id_is
from ._times import decode_time, encode_time

__all__ = [
    "CODED_TYPES",
    "NAMED_TYPES",
    "NameNeeded",
    "code_message",
    "decode_fields",
    "doc_fields",
    "encode_fields",
    "field_sql",
    "fields_sql",
    "first_fields_sql",
    "forget",
    "install",
    "recode_doc",
    "renamed",
    "row_name",
]

# The same text as ``_rows.dumps_acyclic`` (what a snapshot's "f" is written as).
_dumps = compact_encoder(allow_nan=True, check_circular=False)
_raw_decode = json.JSONDecoder().raw_decode

# Transforms (a field's second item; a derived one's third is what it derives from).
_PLAIN: Final = 0
_TIME: Final = 1
_WORDS: Final = 2
_SAME: Final = 3  # equal to an earlier field
_JOINED: Final = 4  # two earlier fields joined by ":"
_NAME: Final = 5  # the row's name after a prefix

_ROLES: Final = ("user", "assistant", "system", "tool")
_STATUSES: Final = ("open", "completed", "abandoned")

_MESSAGE = "conversation_message"
_TURN = "conversation_turn"

#: The templates, by code (its place here + 1): the type, then each field and transform.
#: Part of the file format: append only (a template's fields too, at its end).
_TEMPLATES: Final[tuple[tuple[str, tuple[tuple[Any, ...], ...]], ...]] = (
    (
        _MESSAGE,
        (
            ("role", _WORDS, _ROLES),
            ("sender_kind", _SAME, "role"),
            ("content", _PLAIN),
            ("turn_key", _NAME, _MESSAGE + ":"),
            ("turn_number", _PLAIN),
            # a caller's extra fields, sorted (``message_entity``), then the rest declared
            ("recipient_agent_id", _PLAIN),
            ("reporter_app_version", _PLAIN),
            ("reporter_channel", _PLAIN),
            ("reporter_git_ref", _PLAIN),
            ("reporter_git_sha", _PLAIN),
            ("schema_version", _PLAIN),
            ("sender_agent_id", _PLAIN),
        ),
    ),
    (
        _TURN,
        (
            ("session_id", _PLAIN),
            ("turn_id", _PLAIN),
            ("turn_key", _JOINED, ("session_id", "turn_id")),
            ("status", _WORDS, _STATUSES),
            ("harness", _PLAIN),
            ("model", _PLAIN),
            ("started_at", _TIME),
            ("ended_at", _TIME),
            ("tool_invocation_count", _PLAIN),
            ("retrieved_entity_ids", _PLAIN),
            ("stored_entity_ids", _PLAIN),
            ("injected_context_chars", _PLAIN),
            ("safety_net_used", _PLAIN),
            # the rest declared, in the type's order
            ("conversation_id", _PLAIN),
            ("harness_version", _PLAIN),
            ("hook_events", _PLAIN),
            ("missed_steps", _PLAIN),
            ("store_structured_calls", _PLAIN),
            ("retrieve_calls", _PLAIN),
            ("neotoma_tool_failures", _PLAIN),
            ("harness_loop_count", _PLAIN),
            ("failure_hint_shown", _PLAIN),
            ("cwd", _PLAIN),
            ("working_directory", _PLAIN),
            ("git_branch", _PLAIN),
            ("active_file_refs", _PLAIN),
            ("context_source", _PLAIN),
        ),
    ),
)

#: the entity types whose fields the codec may hold
CODED_TYPES: Final = frozenset(t for t, _ in _TEMPLATES)
#: those whose template derives a value from the row's name (a write reads it first)
NAMED_TYPES: Final = frozenset(t for t, fields in _TEMPLATES if any(f[1] == _NAME for f in fields))

# Per type: its code, its fields, and each field's place.
_BY_TYPE: Final = {
    entity_type: (code, fields, {f[0]: at for at, f in enumerate(fields)})
    for code, (entity_type, fields) in enumerate(_TEMPLATES, 1)
}


# What ``encode_fields`` coded lately, by (type, fields' text, name): at most _MAX_MEMO
# texts of at most _MAX_MEMO_TEXT characters (each step is atomic under the GIL).
_coded: dict[tuple[str, str, str | None], str] = {}
_MAX_MEMO: Final = 64
_MAX_MEMO_TEXT: Final = 4096


class NameNeeded(ValueError):
    """A coded value is derived from its row's name, and its reader gave none."""


def encode_fields(
    entity_type: str,
    fields: Mapping[str, Any],
    text: str,
    name: str | None,
    *,
    exact: bool = False,
) -> str:
    """What a row stores for ``fields`` (``text``: their JSON as ``_rows.dumps_acyclic``
    writes it, else they stay ``text``; ``exact``: the caller wrote ``text`` so): coded
    when ``entity_type`` has a template and decoding gives them back exactly, else
    ``text``. ``name``: the row's canonical name (``None``: nothing is derived from it).

    Exactly, by construction (``test_field_codec`` checks the round trip on any fields):
    the keys are the template's, in its order; a plain value is kept as it is; a time is
    coded only as the milliseconds ``encode_time`` gives back as the same text; a word only
    as its index, and a value that would read as an index (an int) keeps the object; a
    derived value only where it is the text derived, and a value that would read as the
    marker (the int 0) keeps the object."""
    template = _BY_TYPE.get(entity_type)
    if template is None or not fields:
        return text
    if entity_type not in NAMED_TYPES:
        name = None  # its template derives nothing from it
    if exact:
        # A turn record's close codes its open fields again (its first observation's):
        # the same text its enter coded as the snapshot's.
        memo = (entity_type, text, name)
        hit = _coded.get(memo)
        if hit is not None:
            return hit
    code, slots, places = template
    values: list[Any] = []
    append = values.append
    place = places.get
    mask = 0
    last = -1
    prefix = True
    for key, value in fields.items():
        at = place(key)
        if at is None or at <= last:
            return text  # a field the template does not hold, or another order
        if at != last + 1:
            prefix = False
        last = at
        mask |= 1 << at
        slot = slots[at]
        kind = slot[1]
        if kind == _PLAIN:
            pass
        elif kind == _TIME:
            value = encode_time(value) if type(value) is str else None
            if type(value) is not int:
                return text  # not a time as the store writes them
        elif type(value) is int:
            if kind == _WORDS or value == 0:
                return text  # it would read as a word's index, or as the marker
        elif type(value) is str:
            if kind == _WORDS:
                if value in slot[2]:
                    value = slot[2].index(value)
            elif value == _derived(kind, slot[2], fields, name):
                value = 0
        append(value)
    if not exact and _dumps(fields) != text:
        return text
    coded = _dumps([code, *values] if prefix else [-code, mask, *values])
    if exact and len(text) <= _MAX_MEMO_TEXT:
        if len(_coded) >= _MAX_MEMO:
            _coded.clear()
        _coded[memo] = coded
    return coded


_MESSAGE_CODE: Final = _BY_TYPE[_MESSAGE][0]
_MESSAGE_NAME: Final = _MESSAGE + ":"
_MESSAGE_KEYS: Final = ["role", "sender_kind", "content", "turn_key", "turn_number"]


def code_message(fields: Mapping[str, Any], name: str) -> str | None:
    """:func:`encode_fields` of a ``conversation_message``'s ``fields`` named ``name``
    (``exact``), made directly when they are the shape every turn writes: ``role``,
    ``sender_kind``, ``content`` and ``turn_key``, texts, then perhaps a ``turn_number``
    int, in that order; else ``None`` (the caller codes them in full)."""
    keys = list(fields)
    if keys != _MESSAGE_KEYS[: len(keys)] or len(keys) < 4:
        return None
    values = list(fields.values())
    if len(values) == 5:
        number = values[4]
        if type(number) is not int or number == 0:
            return None  # not an int, or one that would read as the marker: in full
    role, sender_kind, content, turn_key = values[:4]
    if (
        type(role) is not str
        or type(sender_kind) is not str
        or type(content) is not str
        or type(turn_key) is not str
    ):
        return None
    values[0] = _ROLES.index(role) if role in _ROLES else role
    if sender_kind == role:
        values[1] = 0
    if name == _MESSAGE_NAME + turn_key:
        values[3] = 0
    return _dumps([_MESSAGE_CODE, *values])


def forget() -> None:
    """Empty the memo of coded texts (a store closing: its texts are not kept past it)."""
    _coded.clear()


def _derived(kind: int, arg: Any, fields: Mapping[str, Any], name: str | None) -> str | None:
    """The text a derived field's ``0`` stands for (``None``: none)."""
    if kind == _SAME:
        same = fields.get(arg)
        return same if type(same) is str else None
    if kind == _JOINED:
        a, b = fields.get(arg[0]), fields.get(arg[1])
        return f"{a}:{b}" if type(a) is str and type(b) is str else None
    return name[len(arg) :] if name is not None and name.startswith(arg) else None


@functools.lru_cache(maxsize=256)
def _layout(code: int, shape: int) -> tuple[tuple[Any, ...], ...]:
    """The fields of a coded list: template ``code``'s first ``shape`` ones (``code`` > 0)
    or those at the bits of the mask ``shape``."""
    if code == 0 or abs(code) > len(_TEMPLATES):
        raise ValueError("a coded field list names no template")
    slots = _TEMPLATES[abs(code) - 1][1]
    if code > 0:
        if shape > len(slots):
            raise ValueError("a coded field list is longer than its template")
        return slots[:shape]
    return tuple(slot for at, slot in enumerate(slots) if shape >> at & 1)


def decode_fields(coded: Sequence[Any], name: str | None) -> dict[str, Any]:
    """The fields :func:`encode_fields` coded as ``coded`` (the row's ``name`` for a value
    derived from it: :class:`NameNeeded` without)."""
    code = coded[0]
    if code > 0:
        values = coded[1:]
        layout = _layout(code, len(values))
    else:
        values = coded[2:]
        layout = _layout(code, coded[1])
    out: dict[str, Any] = {}
    for slot, value in zip(layout, values, strict=True):
        kind = slot[1]
        if kind and type(value) is int:
            if kind == _TIME:
                value = decode_time(value)
            elif kind == _WORDS:
                value = slot[2][value]
            elif value == 0:
                if kind == _SAME:
                    value = out[slot[2]]
                elif kind == _JOINED:
                    value = f"{out[slot[2][0]]}:{out[slot[2][1]]}"
                elif name is None:
                    raise NameNeeded("a coded field is derived from its row's name: none given")
                elif not name.startswith(slot[2]):
                    raise ValueError("a coded field's row has another name")
                else:
                    value = name[len(slot[2]) :]
        out[slot[0]] = value
    return out


def doc_fields(doc: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    """A parsed snapshot doc's "f" as the fields it holds (``{}`` for none)."""
    fields = doc.get("f", {})
    return decode_fields(fields, name) if type(fields) is list else dict(fields)


# -- SQL ------------------------------------------------------------------------------------

_CODED_DOC: Final = '{"f":['
# SQL: a snapshot doc (a JSON object) whose "f" is coded (no braces: statements are
# formatted with ``str.format``)
_IS_CODED: Final = "substr({doc}, 2, 5) = '\"f\":['"


def _sql_fields(text: str | None, name: str | None) -> str | None:
    """``codec_fields(doc or first_fields, name)``: the fields' JSON as an object."""
    if text is None:
        return None
    start = 5 if text.startswith(_CODED_DOC) else 0
    value = _raw_decode(text, start)[0]
    if type(value) is not list:
        return _dumps(value.get("f")) if type(value) is dict else None
    return _dumps(decode_fields(value, name))


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function ``codec_fields`` (:func:`fields_sql`)."""
    conn.create_function("codec_fields", 2, _sql_fields, deterministic=True)


def fields_sql(doc: str = "snapshot", name: str = "canonical_name") -> str:
    """SQL for ``json_extract(doc, '$.f')`` of a snapshot column ``doc`` in either form
    (``name``: the row's canonical name column): the same text."""
    return (
        f"(CASE WHEN {_IS_CODED.format(doc=doc)} THEN codec_fields({doc}, {name}) "
        f"ELSE json_extract({doc}, '$.f') END)"
    )


def field_sql(
    field: str, doc: str = "snapshot", name: str = "canonical_name", fn: str = "json_extract"
) -> str:
    """SQL for ``fn(doc, '$.f.<field>')`` of a snapshot column in either form (``fn``: e.g.
    ``json_type``); ``field`` ``"?"``: the field's name is a parameter, bound twice."""
    inner, outer = (
        ("'$.' || ?", "'$.f.' || ?") if field == "?" else (f"'$.{field}'", f"'$.f.{field}'")
    )
    return (
        f"(CASE WHEN {_IS_CODED.format(doc=doc)} "
        f"THEN {fn}(codec_fields({doc}, {name}), {inner}) ELSE {fn}({doc}, {outer}) END)"
    )


def first_fields_sql(column: str = "first_fields", name: str = "canonical_name") -> str:
    """SQL for a ``first_fields`` column as the JSON object it held (NULL stays NULL)."""
    return (
        f"(CASE WHEN substr({column}, 1, 1) = '[' THEN codec_fields({column}, {name}) "
        f"ELSE {column} END)"
    )


def recode_doc(doc: str, entity_type: str, name: str | None) -> str:
    """A stored snapshot doc with its "f" coded where :func:`encode_fields` codes it (the
    rest of the text as it was)."""
    if entity_type not in CODED_TYPES or not doc.startswith('{"f":{'):
        return doc
    fields, end = _raw_decode(doc, 5)
    coded = encode_fields(entity_type, fields, doc[5:end], name)
    return doc if coded == doc[5:end] else '{"f":' + coded + doc[end:]


def row_name(conn: sqlite3.Connection, entity_type: str, packed_id: str | bytes) -> str | None:
    """The canonical name a write of an existing row codes it with: read only for
    ``NAMED_TYPES`` (``None`` for the others: their templates derive nothing from it)."""
    if entity_type not in NAMED_TYPES:
        return None
    row = conn.execute(
        f"SELECT canonical_name FROM entities WHERE {id_is('?1')}", (packed_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def _recoded(entity_type: str, coded: Any, old: str, new: str) -> str:
    text = _dumps(decode_fields(coded, old))
    return encode_fields(entity_type, json.loads(text), text, new)


def renamed(
    conn: sqlite3.Connection, entity_type: str, packed_id: str | bytes, old: str, new: str
) -> None:
    """Code a row renamed from ``old`` to ``new`` again (its doc's "f" and its
    ``first_fields``), as a write under its new name would have."""
    if entity_type not in NAMED_TYPES:
        return
    row = conn.execute(
        f"SELECT snapshot, first_fields FROM entities WHERE {id_is('?1')}", (packed_id,)
    ).fetchone()
    if row is None:
        return
    doc, first = row
    if doc.startswith(_CODED_DOC):
        coded, end = _raw_decode(doc, 5)
        doc = '{"f":' + _recoded(entity_type, coded, old, new) + doc[end:]
    if first is not None and first.startswith("["):
        first = _recoded(entity_type, json.loads(first), old, new)
    conn.execute(
        f"UPDATE entities SET snapshot = ?1, first_fields = ?2 WHERE {id_is('?3')}",
        (doc, first, packed_id),
    )
