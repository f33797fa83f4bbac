"""One ``bookkeeping_names`` document a turn (schema version 17).

A turn creates three bookkeeping entities whose names are nearly the same text: its turn
record ``conversation_turn:{cid}|{tid}``, its user message ``conversation_message:{cid}:
{tid}`` and, at its close, its assistant message ``...:{tid}:assistant``. The turn
record's document (numbered as its row, as every document) holds the two message names
its name derives (:func:`message_names`), written by the enter (:func:`index_turn_names`),
so a message named so has no document of its own and the close writes no full-text index
at all. Any other bookkeeping entity keeps a document of its own (a conversation, a
message of a name no turn record derives or whose turn record has none, a renamed one:
its name and aliases, ``book_text``; :func:`document_text` is every document's text).

A search that matches a turn record's document (:func:`expand`) reads the messages whose
derived names hold the needle, found by the ids the store derives from those names
(``entity_id_for``, in the row's user's tenant); each is then checked against its stored
names as any candidate is, so a message not written (an abandoned turn's reply), erased
or renamed is never a false hit. The derivation starts from the turn record's first name
(its first alias once renamed: a rename keeps the old name as an alias), and a message
goes without a document of its own only while it is named as derived, with no alias: a
rename gives it one (``_name_index.rename``). Hits come back in row order, as from one
document an entity. Document numbers stay the rows' (FTS5 writes a doclist's first
number whole: a negative one, as a varint, takes 9 bytes where a row's takes 2 or 3).

A purge, and the migration from the version before, build the index again from the entity rows
(:func:`rebuild_book_names`), grouped the same way.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from ..._neotoma.identity import Identity, entity_id_for
from . import _scope
from ._id_prefix import id_among, id_is
from ._name_queue import clear as clear_queue
from ._name_queue import put
from ._rows import decode_entity, encode_entity, entity_text
from ._type_index import of_type

__all__ = [
    "GROUPED_NAMES",
    "MESSAGE",
    "TURN",
    "Planned",
    "book_text",
    "document_text",
    "expand",
    "index_turn_names",
    "message_names",
    "rebuild_book_names",
]

TURN: Final = "conversation_turn"
MESSAGE: Final = "conversation_message"
_TURN_PREFIX: Final = f"{TURN}:"
_MESSAGE_PREFIX: Final = f"{MESSAGE}:"
_ASSISTANT: Final = ":assistant"

_INSERT: Final = "INSERT INTO bookkeeping_names (rowid, text) VALUES (?, ?)"

# The migration to version 17: every document dropped, then built again grouped
# (rebuild_book_names, run right after it).
GROUPED_NAMES: Final = """
INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('delete-all');
"""


def book_text(name: str, aliases: Sequence[str]) -> str:
    """The text of an entity's own ``bookkeeping_names`` document (``aliases`` its aliases),
    or of a turn's (``name`` the turn record's, ``aliases`` its messages'): the names,
    lowercased, one a line, and a blank line after them, so that every occurrence of a
    needle of one or two characters begins a trigram (``_name_index._short_book_rows``). A
    contentless document is taken out by naming this text again."""
    return "\n".join(n.lower() for n in (name, *aliases)) + "\n\n"


def message_names(turn_name: str) -> tuple[str, str] | None:
    """The user and assistant message names a turn record named ``turn_name`` derives
    (``conversation_turn:{cid}|{tid}``: the last ``|`` splits it); None for a name of
    another shape."""
    if not turn_name.startswith(_TURN_PREFIX):
        return None
    head, bar, tail = turn_name[len(_TURN_PREFIX) :].rpartition("|")
    if not bar:
        return None
    user = f"{_MESSAGE_PREFIX}{head}:{tail}"
    return user, user + _ASSISTANT


def _turn_names_of(message_name: str) -> Iterable[str]:
    """The names of the turn records from whose names ``message_name`` derives."""
    if not message_name.startswith(_MESSAGE_PREFIX):
        return
    rests = [message_name[len(_MESSAGE_PREFIX) :]]
    if message_name.endswith(_ASSISTANT):
        rests.insert(0, rests[0][: -len(_ASSISTANT)])
    for rest in rests:
        head, colon, tail = rest.rpartition(":")
        if colon:
            turn = f"{_TURN_PREFIX}{head}|{tail}"
            if message_name in (message_names(turn) or ()):
                yield turn


def _first_name(name: str, aliases: str | Sequence[str]) -> str:
    """The name an entity row was created with: its first alias once renamed (a rename
    appends the old name to the aliases, which start empty); ``aliases`` as the row holds
    them (JSON) or as a list."""
    if aliases == "[]" or not aliases:
        return name
    first = json.loads(aliases) if isinstance(aliases, str) else aliases
    return str(first[0]) if first else name


def document_text(entity_type: str, name: str, aliases: Sequence[str]) -> str:
    """The text of a bookkeeping entity's document: its name and aliases, and for a turn
    record the names of the two messages its first name derives."""
    if entity_type == TURN:
        first = _first_name(name, aliases)
        names = message_names(first)
        if names is not None:
            rest = (name, *aliases[1:]) if aliases else ()
            return book_text(first, (*names, *rest))
    return book_text(name, aliases)


def _derived(entity_id: str, entity_type: str, name: str, tenant: str | None) -> bool:
    """Whether ``entity_id`` is the id the store derives from ``name`` (not given by a
    ``target_id``): then a search finds the entity from the name alone."""
    return entity_id == entity_id_for(entity_type, name, tenant)


class Planned(Protocol):
    """An entity a store writes, as it planned it: ``names``, its row's ``canonical_name``
    and ``aliases`` as the store loaded them (None: not loaded, a new entity or one named
    by ``target_id``)."""

    entity_type: str
    identity: Identity
    names: tuple[str, str] | None


def index_turn_names(
    conn: sqlite3.Connection,
    new: Sequence[Planned],
    firsts: Mapping[str, tuple[int, Any]],
    planned: Iterable[Planned],
) -> None:
    """Make the messages and turn records a store created (``new``, in the order written;
    ``firsts`` holds their rowids) findable by substring: a turn record's document holds
    its messages' names; a message goes into a turn's document when that turn record has
    one (written now, or before: ``planned`` holds the turn records this store wrote),
    else into one of its own."""
    tenant = _scope.tenant()
    turns: dict[str, str] = {}
    loaded: dict[str, tuple[str, str]] = {}
    for p in planned:
        if p.entity_type == TURN:
            turns[p.identity.canonical_name] = p.identity.entity_id
            if p.names is not None:
                loaded[p.identity.entity_id] = p.names
    created = [(firsts[p.identity.entity_id][0], p.entity_type, p.identity) for p in new]
    grouped: set[str] = set()
    for rowid, entity_type, ident in created:
        if entity_type == TURN:
            put(conn, rowid, document_text(TURN, ident.canonical_name, ()))
            grouped.update(message_names(ident.canonical_name) or ())
    for rowid, entity_type, ident in created:
        if entity_type == TURN:
            continue
        name = ident.canonical_name
        if not (
            _derived(ident.entity_id, entity_type, name, tenant)
            and (name in grouped or _has_turn_record(conn, name, turns, loaded, tenant))
        ):
            put(conn, rowid, book_text(name, ()))


_TURN_SQL: Final = (
    f"SELECT canonical_name, aliases FROM entities WHERE {id_is('?1')} AND {of_type(TURN)}"
)


def _has_turn_record(
    conn: sqlite3.Connection,
    name: str,
    turns: Mapping[str, str],
    loaded: Mapping[str, tuple[str, str]],
    tenant: str | None,
) -> bool:
    """Whether the message name ``name`` derives from a turn record's (first) name, so its
    document holds it.

    A turn record the store loaded (a turn's close restates it: ``loaded``, its row's names
    as read) is not read again: its first name is the one it was loaded with, whatever the
    store did since, since a rename only appends the old name to the aliases (``_rename``),
    which leaves their first, or makes the loaded name it."""
    for turn in _turn_names_of(name):
        turn_id = turns.get(turn) or entity_id_for(TURN, turn, tenant)
        row = loaded.get(turn_id)
        if row is None:
            row = conn.execute(_TURN_SQL, (encode_entity(turn_id),)).fetchone()
        if row is not None and _first_name(row[0], row[1]) == turn:
            return True
    return False


def _tenants(conn: sqlite3.Connection) -> dict[int, str | None]:
    return {0: None, **{int(u): str(t) for u, t in conn.execute("SELECT uid, user_id FROM users")}}


# The candidate rows of the messages a search finds through turns' documents, as
# ``_name_index`` reads its other candidates: (0, id, name, aliases, rowid, uid, type).
_MESSAGES_SQL: Final = (
    f"SELECT 0, {entity_text('id')}, canonical_name, aliases, rowid, uid, entity_type, id "
    "FROM entities WHERE {among}"
)
#: ids a statement binds (SQLite allows 32,766)
_CHUNK: Final = 500


def expand(conn: sqlite3.Connection, needle: str, rows: Sequence[Any]) -> list[Any]:
    """The candidate rows of the messages whose names the matched turns' documents hold
    and contain ``needle`` (``rows``: candidate rows, as above; those of turn records
    lead to their messages), read a few hundred ids a statement."""
    tenants: dict[int, str | None] = {0: None}
    wanted: dict[bytes | str, int] = {}  # a message's id, as its row holds it: its user
    for row in rows:
        if row[6] != TURN:
            continue
        derived = message_names(_first_name(str(row[2]), str(row[3])))
        if derived is None:
            continue
        # (the user's name begins the assistant's: a needle in it is in both)
        names: Sequence[str] = derived
        if needle not in derived[0].lower():
            if needle not in derived[1].lower():
                continue  # a message still named so does not hold it either
            names = derived[1:]
        uid = row[5]
        if uid not in tenants:
            tenants = _tenants(conn)
        for name in names:
            wanted[encode_entity(entity_id_for(MESSAGE, name, tenants.get(uid)))] = uid
    out: list[Any] = []
    ids = list(wanted)
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at : at + _CHUNK]
        sql = _MESSAGES_SQL.format(among=id_among(len(chunk)))
        out.extend(r[:7] for r in conn.execute(sql, chunk) if wanted[r[7]] == r[5])
    return out


_QUEUE_SQL: Final = (
    "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'bookkeeping_names_queue'"
)


def rebuild_book_names(conn: sqlite3.Connection) -> None:
    """Every bookkeeping entity's names into an emptied ``bookkeeping_names``, grouped a
    turn a document as the store writes them (the migration to this layout, and a purge),
    the queue emptied (``_name_queue``: schema version 21 on)."""
    if conn.execute(_QUEUE_SQL).fetchone() is not None:
        clear_queue(conn)
    conn.execute("INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('delete-all')")
    tenants = _tenants(conn)
    grouped: set[tuple[int, str]] = set()
    for rowid, _, name, aliases, uid, _ in _rows(conn, (TURN,)):
        listed = _aliases(aliases)
        conn.execute(_INSERT, (rowid, document_text(TURN, name, listed)))
        grouped.update((uid, n) for n in message_names(_first_name(name, listed)) or ())
    for rowid, entity_id, name, aliases, uid, entity_type in _rows(conn, ("conversation", MESSAGE)):
        if (
            entity_type == MESSAGE
            and aliases == "[]"
            and (uid, name) in grouped
            and _derived(decode_entity(entity_id), MESSAGE, name, tenants.get(uid))
        ):
            continue
        conn.execute(_INSERT, (rowid, book_text(name, _aliases(aliases))))


def _aliases(raw: str) -> list[str]:
    return [] if raw == "[]" else [str(a) for a in json.loads(raw)]


def _rows(conn: sqlite3.Connection, types: tuple[str, ...]) -> Iterable[tuple[Any, ...]]:
    from ._scan import rows_of_types  # a migration's and a purge's: never a hook's

    return rows_of_types(conn, "rowid, id, canonical_name, aliases, uid, entity_type", types)
