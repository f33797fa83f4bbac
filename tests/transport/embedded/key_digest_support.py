"""The idempotency keys as the versions before ``KEY_DIGESTS`` held them (keyed by the
user and the key's whole 16-byte digest, no slot), for the copies of a file "as the
version before held it" that a format step's tests compare with: such a copy is opened
again from its older version, so its key rows must be the ones that version held
(``_key_digest`` keys them by 4 bytes of the digest and a slot)."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._key_digest import KEY_DIGESTS, key_digest
from neotoma_agent.transport.embedded._key_rows import key_text
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["SHORT", "full_digests", "has_slots"]

#: the version whose key rows are found by 4 bytes of digest and a slot
SHORT = MIGRATIONS.index(KEY_DIGESTS) + 1

_FULL = """
CREATE TABLE idempotency_keys_full (
    uid INTEGER NOT NULL DEFAULT 0,
    digest BLOB NOT NULL,
    key TEXT NOT NULL,
    source_id BLOB NOT NULL,
    observations TEXT NOT NULL,
    created_at NOT NULL,
    PRIMARY KEY (uid, digest)
) WITHOUT ROWID;
INSERT INTO idempotency_keys_full
    SELECT uid, full_digest(key), key, source_id, observations, created_at
    FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_full RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_source
    ON idempotency_keys (substr(source_id, 1, 4))
"""


def has_slots(conn: sqlite3.Connection) -> bool:
    """Whether the file of ``conn`` keys its idempotency keys by a short digest and slot."""
    return "slot" in {r[1] for r in conn.execute("PRAGMA table_info(idempotency_keys)")}


def full_digests(conn: sqlite3.Connection, version: int = SHORT - 1) -> None:
    """The key rows of the file of ``conn`` (in a transaction) as ``version`` held them:
    by the whole 16-byte digest of the key's text before ``SHORT``."""
    if version >= SHORT or not has_slots(conn):
        return
    conn.create_function("full_digest", 1, lambda k: key_digest(key_text(k)))
    for statement in _FULL.strip().split(";\n"):
        conn.execute(statement)
