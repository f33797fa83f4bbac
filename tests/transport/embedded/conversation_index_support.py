"""The conversation index as the versions before ``NUMBERED`` held it (by the entities'
12-byte ids), for the copies of a file "as the version before held it" that a format
step's tests compare with: such a copy is opened again from its older version, so its
conversation index must be the one that version held (``NUMBERED`` numbers it by entity
rows: ``_conversation_index``)."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._conversation_index import NUMBERED_INDEX
from neotoma_agent.transport.embedded._schema import MIGRATIONS

__all__ = ["NUMBERED", "by_ids", "unnumber"]

#: the version whose conversation index holds the entity rows' numbers
NUMBERED = MIGRATIONS.index(NUMBERED_INDEX) + 1

# (the ids as the entity rows hold them: packed since version 12, as the index held them)
_BY_IDS = """
CREATE TABLE conversation_messages_ids (
    conversation_id NOT NULL,
    seq INTEGER NOT NULL,
    message_id NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID;
INSERT INTO conversation_messages_ids
    SELECT c.id, cm.seq, m.id FROM conversation_messages cm
    JOIN entities c ON c.rowid = cm.conversation_row
    JOIN entities m ON m.rowid = cm.message_row;
DROP TABLE conversation_messages;
ALTER TABLE conversation_messages_ids RENAME TO conversation_messages;
CREATE INDEX conversation_messages_by_message ON conversation_messages (message_id)
"""


def by_ids(conn: sqlite3.Connection) -> bool:
    """Whether the file of ``conn`` holds the conversation index by ids."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(conversation_messages)")}
    return "message_id" in columns


def unnumber(conn: sqlite3.Connection, version: int = NUMBERED - 1) -> None:
    """The conversation index of the file of ``conn`` (in a transaction) as ``version`` held
    it: by ids before ``NUMBERED``. Call it before the entity rows' ids are unpacked (as
    version 11 held them), whose packed ids the index held."""
    if version >= NUMBERED or by_ids(conn):
        return
    for statement in _BY_IDS.strip().split(";\n"):
        conn.execute(statement)
