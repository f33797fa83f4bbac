"""``OpenTurn``: a turn opened by ``memory.open_turn()`` and waiting for its close.

The explicit API's turn: what the enter store wrote and retrieval found, plus what the
caller records for the closing store (tool calls, produced entities), which
``close_turn`` / ``abandon_turn`` of the memory that opened it write.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._engine.phase_records import Opened
from ._recall.context import render_context
from ._recall.history import HistoryTurn
from ._recall.retrieval import RetrievalStats
from ._records.payloads import Produced, merge_produced, produced_entity
from ._records.tools import ToolCall, ToolLog
from ._turn import Turn
from ._util.signature import args_of, method_args_of
from .transport._base import Entity

__all__ = ["OpenTurn"]


@attrs.frozen
class OpenTurn:
    """A turn opened with :meth:`NeotomaMemory.open_turn`, waiting for ``close_turn``."""

    conversation_id: str
    turn_id: str
    turn_key: str
    user_message: str
    user_message_id: str
    conversation_entity_id: str
    #: the bounded set retrieval found, best match first
    retrieved: tuple[Entity, ...]
    retrieval: RetrievalStats
    revision: int | None
    turn_number: int | None
    #: the enter store replayed (this turn id was opened before)
    replayed: bool
    _opened: Opened = attrs.field(repr=False, eq=False)
    #: the conversation's last ``history_turns`` turns before this one, oldest first
    history: tuple[HistoryTurn, ...] = attrs.field(default=(), eq=False)
    #: the model the caller named (``open_turn(..., model=...)``)
    model: str | None = attrs.field(default=None, eq=False)
    _tools: ToolLog = attrs.field(
        default=attrs.Factory(lambda self: ToolLog(self.turn_key), takes_self=True),
        init=False,
        repr=False,
        eq=False,
    )
    # What remember() recorded, by entity id (a frozen record holding a mutable log, as
    # _tools is: the close reads it).
    _produced: dict[str, Produced] = attrs.field(factory=dict, repr=False, eq=False)
    #: the user the store scopes entity ids to (its ``tenant_id``): what remember() derives
    _tenant: str | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def retrieved_ids(self) -> tuple[str, ...]:
        """The entity ids of :attr:`retrieved`."""
        return tuple(e.id for e in self.retrieved)

    @property
    def tools(self) -> tuple[ToolCall, ...]:
        """The tool calls :meth:`record_tool` recorded so far, ordered by ``invoked_at``."""
        return self._tools.calls

    @args_of(ToolCall.create)
    def record_tool(self, *args: Any, **kwargs: Any) -> ToolCall:
        """Record a tool call of this turn, written by ``close_turn`` / ``abandon_turn``.

        The explicit API's :meth:`Turn.record_tool` (same arguments, checks and call-id
        rules). Nothing is stored yet: closing the turn through this memory (by this
        :class:`OpenTurn` or its id) writes every call recorded here, plus any passed as
        ``tools=``. A call recorded in another process travels as
        ``ToolCall.create(...).to_json()`` and comes back with :meth:`ToolCall.from_json`.
        Once this turn is closed (``close_turn`` / ``abandon_turn`` landed), recording
        raises :class:`~neotoma_agent.TurnStateError`: the call would never be stored.
        """
        return self._tools.record(*args, **kwargs)

    def remember(self, entity_type: str, /, **fields: Any) -> str:
        """Record an entity the reply produces; return its id at once, to cite in the reply.

        The explicit API's ``t.remember`` (same arguments, checks and answer): nothing is
        stored yet; closing this turn (``close_turn`` / ``abandon_turn`` with this
        :class:`OpenTurn` or its id, in this process) writes it in the closing store, and
        the assistant message REFERS_TO it. The id is computed here exactly as the server
        computes it; one that retrieval found (same type and name) is extended, never
        duplicated; remembering the same id twice merges the fields (later wins)::

            booking = opened.remember("booking", name="Table for two", party=2)
            await memory.close_turn(opened, f"Booked ({booking}).")
        """
        item = produced_entity(entity_type, fields, extends=self.retrieved_ids, tenant=self._tenant)
        merged = merge_produced((*self._produced.values(), item))
        self._produced.clear()
        self._produced.update((p.entity_id, p) for p in merged)
        return item.entity_id

    @property
    def produced_ids(self) -> tuple[str, ...]:
        """Ids of the entities :meth:`remember` recorded so far."""
        return tuple(self._produced)

    def produce(self, entity_type: str, /, **fields: Any) -> Produced:
        """The older form of :meth:`remember`: the :class:`Produced` record, not recorded.

        Kept so code written before :meth:`remember` works: pass the record to
        ``close_turn(..., produced=[...])`` (its ``entity_id`` is the id :meth:`remember`
        returns). For a turn closed in another process, where this :class:`OpenTurn` is not
        at hand, ``produced=`` is still the way::

            booking = opened.produce("booking", name="Table for two", party=2)
            await memory.close_turn(opened, f"Booked ({booking.entity_id}).", produced=[booking])
        """
        return produced_entity(entity_type, fields, extends=self.retrieved_ids, tenant=self._tenant)

    @method_args_of(Turn.context)
    def context(self, *, history: bool = True, **budget: Any) -> str:
        """The budgeted prompt block of what this turn knows: ``t.context()`` for the explicit API.

        The same text, by the same rules, as :meth:`Turn.context`: the :attr:`retrieved`
        entities in rank order, then :attr:`history`, within ``max_chars`` characters; an
        empty string when there is nothing to show. A caller whose turn spans processes (a
        coding agent's hooks) renders it right after ``open_turn``::

            opened = await memory.open_turn("What about Acme Corp?", turn_id=prompt_id)
            prompt = f"{opened.context(max_chars=2000)}\\n\\nUser: {opened.user_message}"

        ``history``, ``max_tokens`` and ``count_tokens`` as :meth:`Turn.context` takes them;
        ``ValueError`` for a ``max_chars`` that is not an int >= 0.
        """
        return render_context(self.retrieved, self.history if history else (), **budget)
