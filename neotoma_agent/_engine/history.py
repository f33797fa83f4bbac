"""A conversation's history read as a machine step: the pages to ask for, grouped by turn.

A store that pages (the embedded store, the dev server: ``recent_conversation`` with the
``limit`` / ``before`` extension) answers the last messages before a bound and the turn
records of their turns; :func:`page_reads` yields each :class:`~.requests.HistoryPage` it
needs and is sent the page, until it holds one more turn than wanted (the oldest turn of a
page may be cut), or the store has nothing more. :func:`group_turns` groups messages by the
turn their ``turn_key`` names, in the order the store gave them. ``_recall.history`` drives the
pager on a transport and on a store file's own reads, and orders and reads the turns.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

from .._records.keys import _ASSISTANT_SUFFIX, message_entity_id, parse_turn_key
from ..transport._packed_calls import sends_tool_calls
from .requests import HistoryPage

if TYPE_CHECKING:
    from ..transport._results import ConversationMessage, EntitySnapshot, RecentConversation

__all__ = ["Group", "Paged", "group_turns", "page_reads"]

#: messages asked for per turn wanted: a turn is at most two messages, plus slack for
#: concurrent turns whose messages interleave at the page's edge
MESSAGES_PER_TURN: Final = 2
SLACK: Final = 2
#: messages per page when every turn is wanted
WHOLE_PAGE: Final = 1000


def _turn_of(conversation_id: str, turn_key: str) -> tuple[str, str]:
    """``(turn_id, role by key)`` of a message's turn key, grouped by turn."""
    parsed = parse_turn_key(turn_key, conversation_id)
    if parsed is None:
        return turn_key, "user"  # another writer's key: the whole key names its turn
    cid, tid, role = parsed
    # A key of another conversation keeps its conversation part, so it groups apart.
    return (tid if cid == conversation_id else f"{cid}:{tid}"), role


class Group:
    """One turn's messages: ``messages`` are ``(role, message)`` in the order the store
    gave them, ``first`` the position of the first; the records a reader wants
    (StoredMessage for ``show``, HistoryTurn for an agent) are built from the kept turns."""

    __slots__ = ("first", "messages", "turn_id")

    def __init__(self, turn_id: str, first: int) -> None:
        self.turn_id = turn_id
        self.first = first
        self.messages: list[tuple[str, ConversationMessage]] = []


def group_turns(conversation_id: str, messages: Sequence[ConversationMessage]) -> list[Group]:
    """Messages (in the order a store gave them) grouped by turn, in first-seen order."""
    groups: dict[str, Group] = {}
    prefix = f"{conversation_id}:"
    start, cut = len(prefix), -len(_ASSISTANT_SUFFIX)
    for position, m in enumerate(messages):
        if m.turn_key is None and m.content is None and m.role is None:
            # A soft-deleted message (``memory.forget()``): a real server still lists it,
            # with no snapshot; it is no turn.
            continue
        turn_key = m.turn_key or ""
        # The library's own keys (``{cid}:{tid}[:assistant]``), as _turn_of reads them, without
        # its calls: this runs for every message of every history page.
        tid = turn_key[start:] if turn_key.startswith(prefix) else ""
        base = tid[:cut] if tid.endswith(_ASSISTANT_SUFFIX) else None
        if base and ":" not in base:
            turn_id, key_role = base, "assistant"
        elif tid and base is None and ":" not in tid and tid != _ASSISTANT_SUFFIX[1:]:
            turn_id, key_role = tid, "user"
        else:
            turn_id, key_role = _turn_of(conversation_id, turn_key)
        group = groups.get(turn_id)
        if group is None:
            group = groups[turn_id] = Group(turn_id, position)
        group.messages.append((m.role or key_role, m))
    return list(groups.values())


class Paged(NamedTuple):
    """What a store that pages sent: the turns, their records, and the pages that sent
    their tool calls (``None``: not sent, so they are read per turn)."""

    groups: list[Group]
    records: dict[str, EntitySnapshot]
    calls: list[RecentConversation] | None


def page_reads(
    conversation_id: str, entity_id: str, limit: int | None, before: str | None, tenant: str | None
) -> Generator[HistoryPage, RecentConversation, Paged | list[ConversationMessage]]:
    """The pages a history read asks a store that pages for, as a generator (sans I/O):
    it yields each page request and is sent the page; it returns the last ``limit`` turns
    (``None``: all) and their records (by turn id), or, from a store that does not page (a
    real server), every message, from the same one request.

    ``_recall.history._from_reader`` drives it on a transport; ``_recall.history.paged_history``
    makes it a step whose requests a store file's driver answers: one reading of the pages."""
    bound = None if before is None else message_entity_id(conversation_id, before, "user", tenant)
    size = WHOLE_PAGE if limit is None else MESSAGES_PER_TURN * limit + SLACK
    messages: list[ConversationMessage] = []
    seen: set[str] = set()
    records: dict[str, EntitySnapshot] = {}
    calls: list[RecentConversation] | None = []
    while True:
        page: RecentConversation = yield HistoryPage(entity_id, size, bound)
        if page.has_more is None or page.turn_records is None:
            # The route without the extension: the whole conversation, in activity order.
            return list(page.messages)
        fresh = [m for m in page.messages if m.message_id not in seen]
        seen.update(m.message_id for m in fresh)
        messages[:0] = fresh
        records.update(
            (str(r.snapshot.get("turn_id")), r)
            for r in page.turn_records
            if r.snapshot.get("session_id") == conversation_id
        )
        # A page without tool calls (none, or a store that does not send them): the turns
        # whose records count calls are read per turn instead. The calls themselves are
        # parsed only if a turn's ``tools`` is read.
        calls = None if calls is None or not sends_tool_calls(page.raw) else [*calls, page]
        groups = [g for g in group_turns(conversation_id, messages) if g.turn_id != before]
        # The oldest turn of a page may be cut (its other message is older): read on until
        # there is one more turn than wanted, or nothing more.
        enough = limit is not None and len(groups) > limit
        # A page with nothing new ends the read whatever ``has_more`` says: a store that
        # keeps answering the same page must not hold the turn forever.
        if not page.has_more or not fresh or enough:
            if page.has_more and groups:
                groups.remove(min(groups, key=lambda g: g.first))
            return Paged(groups, records, calls)
        bound = page.messages[0].message_id
