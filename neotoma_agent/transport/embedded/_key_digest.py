"""The idempotency keys found by 4 bytes of their digest (a schema step: ``KEY_DIGESTS``).

A key's row is found by a digest of its text (the start of its SHA-256, since schema
version 8), and the table is keyed by it: ``WITHOUT ROWID``, so the key of its B-tree is
what every entry of its index by source (``_key_rows``) holds too. Version 8 took 16 bytes,
so that no two keys would ever share one. Since version 24 the table's key is the user, the
digest's first :data:`DIGEST_BYTES` (4) and a ``slot``: the number of the key among the
user's keys that share those 4 bytes (0 for the first, as nearly every key is, which a
SQLite record stores in no byte but its type). Each row and each index entry is 11 bytes
smaller (12 bytes of digest, one more byte of its record's header).

A read finds a key by its 4 bytes and compares the key's text on the rows it finds (the row
holds it anyway, packed: ``_key_rows``), so a shared digest costs a row more, never a wrong
answer; a new key takes the slot after the last one of its digest. With 4 bytes a user's
keys share a digest once in about 4 billion keys (``2**32``): a row more for one lookup in
about 4,000 in a file of a million keys.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from . import _scope
from ._key_rows import SOURCE_PREFIX, key_text, pack_key, pack_seqs
from ._times import encode_time

__all__ = [
    "DIGEST_BYTES",
    "KEY_DIGESTS",
    "KeySeen",
    "digest",
    "key_digest",
    "key_list",
    "key_seen",
    "record_key",
    "stored_sources",
]

#: the bytes of a key's digest its row is found by (16 in schema versions 8 to 23)
DIGEST_BYTES: Final = 4


def key_digest(key: str) -> bytes:
    """The 16 bytes schema versions 8 to 23 found a key by: the start of its SHA-256."""
    return hashlib.sha256(key.encode()).digest()[:16]


# Memoised: a store digests its key for its check and again for its row.
@functools.lru_cache(maxsize=256)
def digest(key: str) -> bytes:
    """The :data:`DIGEST_BYTES` a key's row is found by: the start of its SHA-256."""
    return hashlib.sha256(key.encode()).digest()[:DIGEST_BYTES]


class KeySeen(NamedTuple):
    """What a store reads of its key: the source id stored under it (as stored; None for
    a new key) and the slot a new row of it takes."""

    source: bytes | None
    slot: int


# The running user's rows of one digest (or several: ``IN``), with what tells them apart.
_ROWS_OF = (
    "SELECT slot, key, {columns} FROM idempotency_keys "
    f"WHERE {_scope.owned(index=True)} AND digest {{match}}"
)
_SEEN = _ROWS_OF.format(columns="source_id", match="= ?")
_LIST = _ROWS_OF.format(columns="observations", match="= ?")


def key_seen(conn: sqlite3.Connection, key: str) -> KeySeen:
    """The source id stored under ``key`` and the slot a new row of it takes."""
    last = -1
    for slot, stored, source in conn.execute(_SEEN, (digest(key),)):
        if key_text(stored) == key:
            return KeySeen(bytes(source), slot)
        last = max(last, slot)
    return KeySeen(None, last + 1)


def record_key(
    conn: sqlite3.Connection,
    key: str,
    source: str | bytes | None,
    seqs: Sequence[int],
    now: str,
    slot: int,
) -> None:
    """``key``'s row: the source id as rows hold it (``_rows.encode_id``), the seqs of what
    it wrote or found, newest first; ``slot`` as :func:`key_seen` gave it."""
    conn.execute(
        "INSERT INTO idempotency_keys "
        "(uid, digest, slot, key, source_id, observations, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            _scope.uid(),
            digest(key),
            slot,
            pack_key(key),
            source,
            pack_seqs(seqs),
            encode_time(now),
        ),
    )


def key_list(conn: sqlite3.Connection, key: str) -> str | bytes:
    """The ``observations`` column of the running user's row of ``key`` (a stored key)."""
    for _, stored, observations in conn.execute(_LIST, (digest(key),)):
        if key_text(stored) == key:
            value: str | bytes = observations
            return value
    raise LookupError("no such idempotency key")  # a caller reads a key it found


def stored_sources(conn: sqlite3.Connection, keys: Iterable[str]) -> dict[str, str | bytes]:
    """The source id stored under each of ``keys`` the running user has, as stored (a
    batch's check: at most a few hundred keys a call)."""
    wanted = set(keys)
    digests = sorted({digest(k) for k in wanted})
    if not digests:
        return {}
    sql = _ROWS_OF.format(columns="source_id", match=f"IN ({','.join('?' * len(digests))})")
    found: dict[str, str | bytes] = {}
    for _, stored, source in conn.execute(sql, digests):
        text = key_text(stored)
        if text in wanted:
            found[text] = source
    return found


#: the migration's script: the table rebuilt keyed by the digest's first bytes and a slot
#: (numbered within a user's keys of the same first bytes in the order of their 16-byte
#: digests), and its index by source built again on the new table.
KEY_DIGESTS: Final = f"""
CREATE TABLE idempotency_keys_v24 (
    uid INTEGER NOT NULL DEFAULT 0,
    digest BLOB NOT NULL,
    slot INTEGER NOT NULL DEFAULT 0,
    key TEXT NOT NULL,
    source_id BLOB NOT NULL,
    observations TEXT NOT NULL,
    created_at NOT NULL,
    PRIMARY KEY (uid, digest, slot)
) WITHOUT ROWID;
INSERT INTO idempotency_keys_v24 (uid, digest, slot, key, source_id, observations, created_at)
    SELECT uid, substr(digest, 1, {DIGEST_BYTES}),
        row_number() OVER (PARTITION BY uid, substr(digest, 1, {DIGEST_BYTES})
            ORDER BY digest) - 1,
        key, source_id, observations, created_at
    FROM idempotency_keys ORDER BY uid, digest;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_v24 RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_source
    ON idempotency_keys (substr(source_id, 1, {SOURCE_PREFIX}));
"""
