"""The conversation index by entity row numbers (schema version 18).

``conversation_messages`` lists each conversation's messages in the order their PART_OF
edges were written: ``(conversation_row, seq, message_row)``, keyed by the conversation
and the position (``WITHOUT ROWID``: a history page is one range of the key), and
``conversation_messages_by_message`` finds a message's rows (a page ``before`` a message,
a message's derived PART_OF edge, ``_part_of``). Both ends are their entity rows' rowids
(1 to 4 bytes) where they were the entities' 12-byte ids: a read joins the entity row by
its rowid (one seek, where an id is two: its unique index, then the row), and a message's
rows go at the right of the index by message, as rowids ascend. A message may be PART_OF
several conversations (a row each), so the index by message stays: the rows hold nothing
else that finds a message's conversation.

Entity rows keep their rowids (no step inserts one again; ``VACUUM`` keeps them), but a
rowid table without AUTOINCREMENT hands the largest rowid out again once its row is
deleted: every deletion of entity rows (``_purge``, the only one) deletes the index rows
of either end first, so that no index row names a later entity.

:func:`row_of` is the SQL of an entity's rowid by its id as the entity rows hold it.
"""

from __future__ import annotations

from typing import Final

from ._id_prefix import id_is

__all__ = ["NUMBERED_INDEX", "row_of"]


def row_of(packed: str) -> str:
    """SQL for the rowid of the entity whose id (as ``encode_entity`` packs it) is the
    SQL expression ``packed`` (NULL: no such entity)."""
    if packed == "?":  # (a parameter by its place: written once, its row's value twice)
        return (
            f"(SELECT e.rowid FROM (SELECT ? AS k) CROSS JOIN entities e ON {id_is('k', 'e.id')})"
        )
    return f"(SELECT rowid FROM entities WHERE {id_is(packed)})"


#: the migration's script: the index's rows renumbered by their entity rows (a row whose
#: message or conversation has no entity row names nothing a read could show: dropped),
#: the table rebuilt in key order, its index by message built again
NUMBERED_INDEX: Final = """
CREATE TABLE conversation_messages_numbered (
    conversation_row INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    message_row INTEGER NOT NULL,
    PRIMARY KEY (conversation_row, seq)
) WITHOUT ROWID;
INSERT INTO conversation_messages_numbered (conversation_row, seq, message_row)
    SELECT c.rowid, cm.seq, m.rowid FROM conversation_messages cm
    JOIN entities c ON c.id = cm.conversation_id
    JOIN entities m ON m.id = cm.message_id
    ORDER BY 1, 2;
DROP TABLE conversation_messages;
ALTER TABLE conversation_messages_numbered RENAME TO conversation_messages;
CREATE INDEX conversation_messages_by_message ON conversation_messages (message_row);
"""
