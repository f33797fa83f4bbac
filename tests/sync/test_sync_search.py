"""``SyncMemory.search``: the blocking twin of ``memory.search``, same arguments and result."""

from __future__ import annotations

import pytest
from sync_support import new_transport, sync_memory, sync_store

from neotoma_agent import EmptySearchQueryError, SearchHitKind
from neotoma_agent.sync import SyncStore

__all__ = ["new_transport", "sync_store"]  # fixtures


def test_search_blocks_and_answers_as_the_async_one(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    with memory.turn("Rotate the TLS certificates on Friday", turn_id="t1") as t:
        t.reply = "Scheduled for Friday."

    result = memory.search("friday", limit=5, conversation_id=memory.conversation_id)

    assert [(h.kind, h.turn_id, h.role) for h in result.hits] == [
        (SearchHitKind.MESSAGE, "t1", "assistant"),
        (SearchHitKind.MESSAGE, "t1", "user"),
    ]
    with pytest.raises(EmptySearchQueryError):
        memory.search("  ")
