"""Bulk reads: a store's optional capability of reading whole entity types at once.

A whole-store audit reads every turn record, every conversation and every message hung
off one. Over the :class:`~neotoma_agent.Transport` methods that is a page of JSON at a
time, built and parsed back; a store that keeps them in tables of its own (the embedded
store's SQLite file) can answer the same reads from those tables directly. Such a store
is :class:`BulkReadable`: its ``_bulk_reader()`` gives a :class:`BulkReader` for one pass
(or ``None`` when it cannot, e.g. an in-memory store), and the audit (``qa._stream``)
reads through that interface alone. Its answers are the ones the Transport reads give
(``tests/qa/test_qa_fast_path.py`` compares both on the same files).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ._results import EntitySnapshot

__all__ = ["BulkReadable", "BulkReader", "MessageRows", "RecordSink"]

#: one turn record: ``(canonical_name, fields, last_observation_at, snapshot)``, where
#: ``snapshot()`` builds its whole :class:`EntitySnapshot` (for the few kept whole)
RecordSink = Callable[
    [str | None, Mapping[str, Any], str | None, Callable[[], EntitySnapshot]], None
]

#: messages hung off conversations: rows of ``(conversation, message entity id,
#: canonical_name, activity)``, the conversation as its index in the ids asked for and the
#: activity as stored, and the function that makes an activity ISO 8601 (or ``None``): the
#: caller decodes only the times it keeps
MessageRows = tuple[Sequence[tuple[int, str, str | None, Any]], Callable[[Any], str | None]]


class BulkReader(Protocol):
    """One pass of bulk reads over a store (what a whole-store audit reads)."""

    async def turn_records(
        self,
        record: RecordSink,
        *,
        completed: Callable[[Sequence[str | None]], None] | None = None,
        times: bool = False,
    ) -> None:
        """Every ``conversation_turn`` entity, into ``record``.

        With ``completed``, the records whose status is ``completed`` go to it instead,
        by canonical name only, a batch at a time. ``times``: read each record's
        ``last_observation_at`` (else ``None`` is passed).
        """

    async def conversations(
        self,
        handle: Callable[[Sequence[tuple[str, str | None]]], Awaitable[None]],
        *,
        times: bool = False,
    ) -> None:
        """Every ``conversation`` entity as ``(entity id, last observation time)``, a page
        at a time (the time only with ``times``). While ``handle`` runs, the messages of
        the next page may be read ahead for :meth:`conversation_messages`."""

    async def conversation_messages(self, conversation_ids: Sequence[str]) -> MessageRows:
        """The ``conversation_message`` entities ``PART_OF`` each of ``conversation_ids``,
        in the order of each conversation's edges."""

    async def deleted_entities(self) -> Sequence[tuple[str, str]]:
        """Every soft-deleted entity as ``(entity id, entity type)``, by id: what no query
        lists, but whose observations a backup keeps (so that a restore leaves each one
        deleted and restorable)."""


@runtime_checkable
class BulkReadable(Protocol):
    """A store that offers :class:`BulkReader` passes (the embedded store does)."""

    def _bulk_reader(self) -> BulkReader | None:
        """A reader for one pass, or ``None`` when this store cannot read in bulk now."""
