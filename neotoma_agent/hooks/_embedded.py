"""A hook's closing of a turn on a store file: the state file's row, closed in the hook's
own thread by the turn machine's synchronous driver (``TurnFile.close_turn``, through
``hooks._core``).

A Stop closes a turn another process opened (so does a session's end, abandoning a turn
that got no Stop): :func:`close`. A prompt opens one: ``hooks._embedded_open``. The file
ends up as ``NeotomaMemory.close_turn`` / ``abandon_turn`` would leave it with the ids the
state file kept (tests/hooks/test_hook_embedded.py replays recorded sessions both ways and
compares every row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neotoma_agent import ToolCall

    from ._core import TurnFile
    from ._state import PendingTurn

__all__ = ["close"]


def close(file: TurnFile, harness: str, row: PendingTurn, tools: Sequence[ToolCall]) -> None:
    """Store the closing phase of ``row`` (its ``ending``), as ``close_turn`` (completed) or
    ``abandon_turn`` (abandoned) of a memory with default settings would from these ids.

    Raises what the store raises (``IdempotencyMismatchError`` for a turn stored before
    with other content, ``ValidationError`` for content it refuses).
    """
    file.close_turn(
        harness,
        row.conversation_id,
        row.turn_id,
        ending=row.ending or "abandoned",
        reply=row.reply,
        error_class=row.error_class,
        model=row.model,
        user_message_id=row.user_message_id,
        retrieved_ids=row.retrieved_ids or (),
        tools=tools,
    )
