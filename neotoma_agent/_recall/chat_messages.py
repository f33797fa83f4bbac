"""A chat API's message list from a conversation's history: one rule, stated once.

``chat_messages(t.history, user=t.user_message)`` gives ``[{"role": ..., "content": ...}]``
for OpenAI-style chat APIs (and Anthropic's ``messages=``, with ``system`` passed apart).

The rule, so the list is one every chat API accepts and the model reads truthfully:

- a **completed** turn gives its user message and its reply (a user/assistant pair);
- an **abandoned** turn (the user pressed stop, or the agent failed) is left out whole by
  default: its partial reply is not an answer the model gave, and its user message alone
  would put two user messages in a row. ``abandoned="partial"`` keeps it as a pair with
  the partial reply the user saw, when that is not empty;
- an **open** turn (still running elsewhere, or cut off by a crash) is left out whole;
- no message ever has empty content: a turn whose user message or reply is empty is left
  out whole, so roles alternate user, assistant, user, ... from the first message.

``system`` (when given) comes first; ``user`` (the current message) comes last.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from .history import HistoryTurn

__all__ = ["chat_messages"]

AbandonedRule = Literal["skip", "partial"]


def chat_messages(
    history: Iterable[HistoryTurn],
    *,
    user: str | None = None,
    system: str | None = None,
    abandoned: AbandonedRule = "skip",
) -> list[dict[str, str]]:
    """The chat API message list of ``history`` (``t.history``, ``memory.history()``).

    Completed turns give a user/assistant pair each; abandoned turns are left out
    (``abandoned="partial"``: kept with their non-empty partial reply); open turns and any
    turn with an empty message are left out, so no message is empty and roles alternate.
    ``system`` goes first, ``user`` (the message being answered) last. ``ValueError`` for
    another ``abandoned`` rule::

        messages = chat_messages(t.history, user=t.user_message, system="You help.")
    """
    if abandoned not in ("skip", "partial"):
        raise ValueError(f"abandoned must be 'skip' or 'partial', got {abandoned!r}")
    messages: list[dict[str, str]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for turn in history:
        if turn.status == "open" or (turn.status == "abandoned" and abandoned == "skip"):
            continue
        if not turn.user or not turn.reply:
            continue
        messages.append({"role": "user", "content": turn.user})
        messages.append({"role": "assistant", "content": turn.reply})
    if user:
        messages.append({"role": "user", "content": user})
    return messages
