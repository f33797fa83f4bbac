"""Two users' memories for the isolation tests: what each planted, and how to find it.

:func:`seed` runs one turn for a user through any transport, with that user's unique
marker in the prompt, the reply, a tool call's arguments and a remembered entity's fields,
and a company both users remember (the same name: two entities, one per user).
"""

from __future__ import annotations

from typing import Any

import attrs

from neotoma_agent._memory import NeotomaMemory

ALICE = "alice@example.com"
BOB = "bob-8812"
MARKERS = {ALICE: "zqalicemarkerqz", BOB: "zqbobmarkerqz"}


@attrs.frozen
class Planted:
    """What :func:`seed` stored for one user."""

    user: str
    marker: str
    conversation_id: str
    conversation_entity_id: str
    entity_ids: tuple[str, ...]  # the turn's messages, record, tool call, remembered ones


async def seed(transport: Any, user: str) -> Planted:
    """One turn of ``user``'s through ``transport`` (scoped to that user)."""
    marker = MARKERS[user]
    conversation = "chat-a" if user == ALICE else "chat-b"
    memory = NeotomaMemory(
        transport,
        conversation_id=conversation,
        platform="tests",
        retrieval_timeout=2.0,
        close_timeout=5.0,
    )
    async with memory.turn(f"Do you know Maria Gomez? {marker} prompt", turn_id="t1") as t:
        async with t.tool("lookup", {"who": f"Maria {marker} args"}) as call:
            call.result = {"found": 1}
        t.remember("person", name="Maria Gomez", notes=f"treats {marker} fields")
        t.remember("company", name="Acme Corp")
        t.reply = f"Yes, {marker} reply."
    result = t.result
    assert result.conversation_entity_id is not None
    ids = {
        result.conversation_entity_id,
        result.user_message_id,
        result.assistant_message_id,
        result.turn_record_id,
        *result.produced_ids,
        *result.tool_ids,
    }
    return Planted(
        user=user,
        marker=marker,
        conversation_id=conversation,
        conversation_entity_id=result.conversation_entity_id,
        entity_ids=tuple(sorted(str(i) for i in ids if i)),
    )
