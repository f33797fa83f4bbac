"""Store files whose bookkeeping names' index holds one document a turn,
the same files as the version before indexed them (one document an entity), and what a lookup of
a needle must answer on either: every conversation, message and turn record whose name or
an alias holds it, in entity row order (the index's answer before it had turns'
documents, which was complete)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from conversation_index_support import unnumber
from version_copy_support import copy_at_version

from neotoma_agent.transport.embedded._name_index import (
    NAME_KINDS,
    backfill_book_names,
    install,
    substring_ids,
)
from neotoma_agent.transport.embedded._name_queue import NAME_QUEUE
from neotoma_agent.transport.embedded._rows import entity_text
from neotoma_agent.transport.embedded._rows import install as install_rows
from neotoma_agent.transport.embedded._schema import MIGRATIONS
from neotoma_agent.transport.embedded._turn_names import GROUPED_NAMES

__all__ = [
    "BEFORE",
    "KINDS",
    "book_names",
    "documents",
    "one_an_entity",
    "scanned",
    "searched",
    "ungrouped_copy",
]

#: the version before a turn's names shared a document
BEFORE = MIGRATIONS.index(GROUPED_NAMES)
#: the kinds a lookup asks for: any, and names and aliases (the second pass's)
KINDS = (None, NAME_KINDS)
_BOOKKEEPING = ("conversation", "conversation_message", "conversation_turn")
QUEUE = "bookkeeping_names_queue"


def one_an_entity(conn: sqlite3.Connection) -> None:
    """The index as the version before held it: one document an entity, numbered as its row
    (and none queued)."""
    if conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (QUEUE,)).fetchone():
        conn.execute(f"DELETE FROM {QUEUE}")
    conn.execute("INSERT INTO bookkeeping_names (bookkeeping_names) VALUES ('delete-all')")
    backfill_book_names(conn)


def ungrouped_copy(path: Path, to: Path, version: int = BEFORE) -> Path:
    """A copy of the (closed) file at ``path`` with one names document an entity, at
    ``version`` (the one before, by default: opening it upgrades it)."""
    return copy_at_version(path, to, version, lambda conn: unnumber(conn, version), one_an_entity)


def documents(path: Path) -> list[int]:
    """The numbers of the index's documents (each an entity row's), queued or not."""
    sql = "SELECT id FROM bookkeeping_names_docsize"
    with closing(sqlite3.connect(path)) as conn:
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_schema")}
        if "bookkeeping_names_queue" in tables:
            sql += " UNION SELECT id FROM bookkeeping_names_queue ORDER BY 1"
        return [int(r[0]) for r in conn.execute(sql)]


def book_names(path: Path) -> list[tuple[str, str, list[str], int]]:
    """Every bookkeeping entity's (id, name, aliases, uid), in row order."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {entity_text('id')}, canonical_name, aliases, uid FROM entities "
            "WHERE entity_type IN (?, ?, ?) ORDER BY rowid",
            _BOOKKEEPING,
        ).fetchall()
    return [(str(i), str(n), list(json.loads(a)), int(u)) for i, n, a, u in rows]


def scanned(path: Path, needle: str, kinds: frozenset[str] | None) -> list[str]:
    """The bookkeeping entities a lookup of ``needle`` (lowercased) must find, in row order."""
    out = []
    for entity_id, name, aliases, _ in book_names(path):
        held = {"name"} if needle in name.lower() else set()
        if any(needle in a.lower() for a in aliases):
            held.add("alias")
        if held and (kinds is None or held & kinds):
            out.append(entity_id)
    return out


@contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path)) as conn:
        install_rows(conn)
        install(conn)
        # (a file of a version before the names' queue: read with an empty one)
        if not conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (QUEUE,)).fetchone():
            conn.executescript(NAME_QUEUE.replace(QUEUE, f"temp.{QUEUE}"))
        yield conn


def searched(path: Path, needles: list[str]) -> dict[tuple[str, str], list[str]]:
    """``substring_ids`` of each needle with each of ``KINDS``, on the file as it is (not
    upgraded: a file of one document an entity is read as the version before read it)."""
    with _reading(path) as conn:
        return {
            (needle, repr(kinds)): substring_ids(conn, needle, kinds)
            for needle in needles
            for kinds in KINDS
        }
