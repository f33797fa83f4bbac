"""What an agent reads of its conversation: earlier turns, as frozen records."""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = ["HistoryStatus", "HistoryTurn"]

HistoryStatus = Literal["completed", "abandoned", "open"]


@attrs.frozen
class HistoryTurn:
    """One earlier turn of a conversation, as stored.

    Revisions and replays show once, with their latest text. An abandoned turn shows the
    partial reply the user saw (``reply``, or ``None`` if nothing was shown); an ``open``
    one is still running (or was cut off by a crash before its reply was stored).
    """

    turn_id: str
    #: the stored turn number, when the turn was given one
    turn_number: int | None
    #: the exact user message
    user: str
    #: the exact reply (partial for an abandoned turn), or ``None`` if none was stored
    reply: str | None
    status: HistoryStatus
    #: entity ids the user message REFERS_TO
    user_refers_to: tuple[str, ...] = ()
    #: entity ids the reply REFERS_TO
    reply_refers_to: tuple[str, ...] = ()
