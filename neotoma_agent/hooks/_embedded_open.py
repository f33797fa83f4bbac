"""A hook's opening of a turn on a store file: the state file's row, opened in the hook's
own thread by the turn machine's synchronous driver (``TurnFile.open_turn``, through
``hooks._core``).

A prompt opens its turn: the user store, the history read, retrieval, and the context block
the answer carries, each a store action on the file, as ``open_turn`` of a memory with
default settings decides them; so the file ends up the same and the answer says the same
(tests/hooks/test_hook_embedded.py replays recorded sessions both ways and compares every
row and every answer). A failed user store wrote nothing (one transaction), so nothing is
abandoned: the turn stays due for a later event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core import Opening, TurnFile
    from ._state import PendingTurn

__all__ = ["open_turn"]


def open_turn(file: TurnFile, harness: str, row: PendingTurn, context_chars: int) -> Opening:
    """Open the turn of ``row`` (its user message), as ``open_turn`` of a memory with
    default settings would, and render its context block within ``context_chars``.

    Raises what the user store raises (``IdempotencyMismatchError`` for a turn id stored
    before with another message); the reads after it are best-effort, as the engine's.
    """
    return file.open_turn(
        harness,
        row.conversation_id,
        row.turn_id,
        row.user_message,
        model=row.model,
        context_chars=context_chars,
    )
