"""A million turns in minutes: one conversation written by the store, then copied row by row.

Writing a turn through the store's own action (``_synth.build_turns``) costs about 3 ms of
CPU on this machine (two stores: identity, snapshots, name index, summary), so a
1,000,000-turn store would take most of an hour of a free core. This generator writes
conversation 0 that way, then copies every row it left in every table to conversations
1..N-1, changing only what names the conversation:

- the conversation id in every text (``bench-0000000`` -> ``bench-000000N``: the same
  length, so names, fields and snapshots keep their shape) and in the turns' idempotency
  keys (rebuilt as the library builds them);
- every entity id (text and 12-byte forms: the entity rows hold the bytes), recomputed from
  the copy's identity fields as the store computes it, so every reader finds the copy by
  the ids it derives;
- observation seqs (an offset per copy: snapshots name their winning observations by seq)
  and every time (an offset per copy: the copies follow each other, as real conversations
  do, so the list is ordered by activity and not by ties);
- the ``trigram_df`` upper bounds are left as they are (titles are the same text).

Everything else is the template's: the texts (a copy's messages and title say
"conversation 0") and the source ids (content hashes): a copy's turn stored again is refused
as an idempotency mismatch instead of replayed. These stores are for reading.

``tests/benchmarks/test_bench_clone.py`` checks that a cloned store answers ``show``, the
summary, and the entity reads exactly as a store built through the store's action, times aside.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from _synth import build_turns, conversation_id, turn_id

from neotoma_agent._neotoma.identity import entity_id_for
from neotoma_agent._records.keys import TurnKeys, conversation_entity_id, turn_record_entity_id
from neotoma_agent.transport.embedded._key_digest import digest, key_seen
from neotoma_agent.transport.embedded._key_rows import key_seqs, pack_key, pack_seqs
from neotoma_agent.transport.embedded._name_index import BOOKKEEPING
from neotoma_agent.transport.embedded._rows import (
    decode_entity,
    decode_word,
    encode_entity,
)
from neotoma_agent.transport.embedded._store import _connect
from neotoma_agent.transport.embedded._turn_names import TURN, document_text, message_names

__all__ = ["build_cloned"]

_TEMPLATE: Final = conversation_id(0)
#: copies per transaction
_PER_COMMIT: Final = 50
_FTS: Final = ("name_index",)
#: the build connection's page cache (KiB): the indexes of a million turns fit
_CACHE_KIB: Final = 3_000_000


def _keys(cid: str, turns: int) -> dict[str, str]:
    return {
        f"{phase}:{t}": TurnKeys(cid, turn_id(t)).idempotency_key(phase)  # type: ignore[arg-type]
        for t in range(turns)
        for phase in ("user", "assistant")
    }


def _offset_seqs(written: str | bytes, offset: int, rows: dict[int, int]) -> bytes:
    """A key's list in a copy: a row's seq offset, an entity row's first observation (minus
    its rowid, schema 11) as the copy's entity row (packed, schema 18: ``_key_rows``), a
    restatement derived from the message before it (0, schema 27) as it is."""
    return pack_seqs(s + offset if s > 0 else s if s == 0 else rows[s] for s in key_seqs(written))


def _offset(value: int, offset: int) -> int:
    """A seq in a snapshot doc, in a copy: 0 (the entity row's first observation) and -1 (a
    restatement derived from a message, schema 27) stay."""
    return value + offset if value > 0 else value


#: a winning observation's meta in a snapshot doc: [id, seq, time, ...] (``_rows``)
_META = re.compile(r'\["([^"]*)",(-?\d+),(\d+),')
_SHARED = re.compile(r'"s":(\d+)')
_LIST = json.JSONDecoder().raw_decode
_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _in(values: list[Any]) -> str:
    return "(" + ",".join("?" * len(values)) + ")"


class _Copier:
    """Rewrites the template's rows for copy ``n`` (ids, seqs, times, the conversation id)."""

    def __init__(self, conn: sqlite3.Connection, turns: int, copies: int) -> None:
        self.turns, self.copies = turns, copies
        head = conversation_entity_id(_TEMPLATE)
        # The conversation's messages, by its index (their PART_OF edges are derived from it).
        ids = [head] + [
            decode_entity(r[0])
            for r in conn.execute(
                "SELECT m.id FROM conversation_messages cm JOIN entities m "
                "ON m.rowid = cm.message_row WHERE cm.conversation_row = "
                "(SELECT rowid FROM entities WHERE id = ?)",
                (encode_entity(head),),
            )
        ]
        ids += [turn_record_entity_id(_TEMPLATE, turn_id(t)) for t in range(turns)]
        packed = [encode_entity(i) for i in ids]
        # each template key's role, by the key as its row holds it (packed: _key_rows)
        self.key_roles = {pack_key(v): k for k, v in _keys(_TEMPLATE, turns).items()}
        keys = list(self.key_roles)
        # (none where every observation is in its entity row: its conversation's restatement
        # derived, schema 28, its turn records' closes held, schema 32, ``_close_row``)
        self.seq_span = int(
            conn.execute(
                "SELECT coalesce(max(seq), 0) FROM observations WHERE entity_row IN "
                f"(SELECT rowid FROM entities WHERE id IN {_in(packed)})",
                packed,
            ).fetchone()[0]
        )
        where = {
            "entities": (f"id IN {_in(packed)}", packed),  # the rows hold ids packed
            "observations": ("seq <= ?", [self.seq_span]),
            "relationships": (f"source_entity_id IN {_in(ids)}", ids),
            # (by the entity rows' numbers: schema version 18)
            "conversation_messages": (
                "conversation_row = (SELECT rowid FROM entities WHERE id = ?)",
                [encode_entity(head)],
            ),
            "field_values": (f"entity_id IN {_in(ids)}", ids),
            "idempotency_keys": (f"key IN {_in(keys)}", keys),
            "conversation_summaries": ("entity_id = ?", [head]),
        }
        #: each template entity's rowid (a key's list names a row's first observation by it)
        self.rowids = {
            int(rowid): decode_entity(i)
            for rowid, i in conn.execute(
                f"SELECT rowid, id FROM entities WHERE id IN {_in(packed)}", packed
            )
        }
        self.rows = {
            table: conn.execute(f"SELECT * FROM {table} WHERE {cond}", args).fetchall()
            for table, (cond, args) in where.items()
        }
        self.fts = {
            t: conn.execute(
                f"SELECT text, entity_id, kind FROM {t} WHERE entity_id IN {_in(ids)}", ids
            ).fetchall()
            for t in _FTS
        }
        # Each template entity's id in a copy: its name's, with the copy's conversation id.
        # (a row holds its type as its word code: ``type_code``, schema version 14)
        # (``SELECT *`` reads the stored columns, then the generated ones: the type, and,
        # since schema version 18, the name, aliases and times its coded columns hold; then
        # the room column ``_close_room`` added, and ``_close_row``'s four)
        self.names = [
            (decode_entity(e[0]), decode_word(e[1]), e[21]) for e in self.rows["entities"]
        ]
        # The template's times: its observation rows', its entity rows' creation and last
        # observation (a time as the row codes it: NULL its creation's, ``_row_codes``).
        times = [int(o[5]) for o in self.rows["observations"]]
        times += [int(e[4]) for e in self.rows["entities"]]
        times += [int(e[8]) for e in self.rows["entities"] if isinstance(e[8], int)]
        self.time_span = max(times) - min(times) + 1
        self.id_pattern = re.compile("|".join(re.escape(i) for i in ids))

    def write(self, conn: sqlite3.Connection, n: int) -> None:
        cid = conversation_id(n)
        id_map = {
            old: entity_id_for(etype, name.replace(_TEMPLATE, cid))
            for old, etype, name in self.names
        }
        bytes_map = {encode_entity(o): encode_entity(i) for o, i in id_map.items()}
        keys = _keys(cid, self.turns)
        # Copies come before the template in time (it was written last, as was the long
        # conversation a benchmark writes after them), in the order of their numbers.
        seq, dt = n * self.seq_span, (n - self.copies) * self.time_span

        def text(value: Any) -> Any:
            if not isinstance(value, str):
                return value
            value = value.replace(_TEMPLATE, cid)
            return self.id_pattern.sub(lambda m: id_map[m.group(0)], value)

        def meta(m: re.Match[str]) -> str:
            return f'["{m.group(1)}",{_offset(int(m.group(2)), seq)},{int(m.group(3)) + dt},'

        def snapshot(doc: str) -> str:
            # The fields come first ("f"), the metas after them: only the tail is rewritten.
            fields, sep, tail = text(doc).rpartition(',"o":[')
            tail = _META.sub(meta, tail)
            # A turn record's observation rows listed by seq alone (schema 25, ``_row_metas``).
            metas, end = _LIST("[" + tail)
            if any(type(m) is int and m > 0 for m in metas):
                listed = [_offset(m, seq) if type(m) is int else m for m in metas]
                tail = _DUMPS(listed)[1:] + tail[end - 1 :]
            tail = _SHARED.sub(lambda m: f'"s":{_offset(int(m.group(1)), seq)}', tail)
            return fields + sep + tail

        def name(code: Any) -> Any:  # the rest of a name after its type, as its bytes
            return text(code.decode()).encode() if isinstance(code, bytes) else text(code)

        def later(code: Any) -> Any:  # NULL: the creation time (moved); b"": none
            return code if code is None or isinstance(code, bytes) else code + dt

        r = self.rows
        conn.executemany(
            "INSERT INTO entities VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    bytes_map[e[0]],
                    e[1],
                    name(e[2]),
                    e[3],
                    e[4] + dt,
                    later(e[5]),
                    snapshot(e[6]),
                    e[7],
                    later(e[8]),
                    e[9],
                    e[10],
                    *e[11:19],
                    text(e[19]),
                    e[-5],  # the room a turn record keeps for its close (``_close_room``)
                    # a turn record's close its row holds (``_close_row``): its id, source
                    # and time after the row's creation as they are, its fields renamed
                    *e[-4:-1],
                    text(e[-1]),
                )
                for e in r["entities"]
            ],
        )
        copies = list(bytes_map.values())
        copied = dict(
            conn.execute(f"SELECT id, rowid FROM entities WHERE id IN {_in(copies)}", copies)
        )
        numbers = {old: int(copied[encode_entity(id_map[i])]) for old, i in self.rowids.items()}
        rows = {-old: -new for old, new in numbers.items()}
        conn.executemany(
            "INSERT INTO observations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    o[0] + seq,
                    o[1],
                    numbers[o[2]],  # by the entity row's number (schema version 21)
                    o[3],
                    o[4],
                    o[5] + dt,
                    *o[6:9],
                    text(o[9]),
                    *o[10:],
                )
                for o in r["observations"]
            ],
        )
        conn.executemany(
            "INSERT INTO relationships VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (id_map[x[0]], x[1], id_map[x[2]], *x[3:7], x[7] + dt, *x[8:])
                for x in r["relationships"]
            ],
        )
        conn.executemany(
            "INSERT INTO conversation_messages VALUES (?,?,?,?)",
            [(numbers[m[0]], m[1], numbers[m[2]], m[3]) for m in r["conversation_messages"]],
        )
        conn.executemany(
            "INSERT INTO field_values VALUES (?,?,?,?,?)",
            [(id_map[f[0]], *f[1:]) for f in r["field_values"]],
        )
        # (uid, digest, slot, key, source_id, observations, created_at): found by 4 bytes
        # of digest, a key that shares them with another in the next slot (``_key_digest``)
        for k in r["idempotency_keys"]:
            key = keys[self.key_roles[k[3]]]
            conn.execute(
                "INSERT INTO idempotency_keys VALUES (?,?,?,?,?,?,?)",
                (
                    k[0],
                    digest(key),
                    key_seen(conn, key).slot,
                    pack_key(key),
                    k[4],
                    _offset_seqs(k[5], seq, rows),
                    k[6] + dt,
                ),
            )
        conn.executemany(
            "INSERT INTO conversation_summaries VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [
                (id_map[s[0]], s[1], text(s[2]), s[3] + dt, *s[4:])
                for s in r["conversation_summaries"]
            ],
        )
        for table in _FTS:
            conn.executemany(
                f"INSERT INTO {table} (text, entity_id, kind) VALUES (?,?,?)",
                [(text(t), id_map[e], k) for t, e, k in self.fts[table]],
            )
        # The bookkeeping names' rows are numbered as the entity rows just written: a turn
        # record's holds its messages' names, and a message named so has none of its own.
        books = [
            (decode_word(e[1]), text(e[21]), json.loads(e[22]), bytes_map[e[0]])
            for e in r["entities"]
            if decode_word(e[1]) in BOOKKEEPING
        ]
        held = {
            n
            for t, name, aliases, _ in books
            if t == TURN and not aliases
            for n in message_names(name) or ()
        }
        conn.executemany(
            "INSERT INTO bookkeeping_names (rowid, text) "
            "SELECT rowid, ? FROM entities WHERE id = ?",
            [
                (document_text(t, name, aliases), packed)
                for t, name, aliases, packed in books
                if aliases or name not in held
            ],
        )


def _copied(conn: sqlite3.Connection, conversations: int) -> int:
    """How many conversations the file holds already (0: none; a build resumed)."""
    row = conn.execute(
        "SELECT max(conversation_id) FROM conversation_summaries WHERE conversation_id < ?",
        (conversation_id(conversations),),
    ).fetchone()
    return 0 if row[0] is None else int(str(row[0]).rsplit("-", 1)[1]) + 1


def build_cloned(
    path: Path,
    conversations: int,
    turns: int,
    *,
    progress: Callable[[int], None] | None = None,
) -> float:
    """``conversations`` x ``turns`` turns at ``path``: conversation 0 through the store's
    action, the others copied from it; the seconds taken. A file cut short is resumed from
    its last committed copy."""
    started = time.perf_counter()
    if not path.exists():
        build_turns(path, 1, turns)
    conn: sqlite3.Connection = _connect(str(path), "OFF")()
    # Ids are hashes, so every copy inserts all over each index: with the store's 64 MB
    # cache a big file's inserts miss it (several times slower past a gigabyte).
    conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
    try:
        copier = _Copier(conn, turns, conversations)
        conn.execute("BEGIN")
        for n in range(max(1, _copied(conn, conversations)), conversations):
            copier.write(conn, n)
            if n % _PER_COMMIT == 0:
                conn.execute("COMMIT")
                if progress is not None:
                    progress(n)
                conn.execute("BEGIN")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started
