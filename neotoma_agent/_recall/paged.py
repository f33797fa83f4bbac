"""Paged reads over any Transport: every entity of a query, a bounded gather, snapshot-or-None.

- :func:`scan_entities` pages through a query: by cursor when the server offers
  ``next_cursor`` (keyset paging: each page costs the same, no offset cap), else by offset.
  A Neotoma server refuses query offsets past 2,000 (``400``, a ``ValidationError`` here):
  the scan then returns what it was given with :attr:`Scan.partial` set, rather than
  failing, so that every reader can say "partial" and still show what it saw.
- :func:`gather_bounded` awaits many calls, at most ``limit`` at a time, and raises the first
  failure bare (not in an exception group), so that callers can explain it.
- :func:`snapshot_or_none` reads one snapshot; ``None`` when the entity does not exist.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from ..exceptions import NotFoundError, ValidationError

if TYPE_CHECKING:
    import anyio

    from ..transport._base import EntitySnapshot, Transport

__all__ = [
    "PAGE_SIZE",
    "READ_CONCURRENCY",
    "Scan",
    "gather_bounded",
    "scan_entities",
    "snapshot_or_none",
]

T = TypeVar("T")

#: the page size asked for (a server may answer with smaller pages; the scan follows it)
PAGE_SIZE: Final = 500
#: how many store reads a reader keeps in flight at once by default
READ_CONCURRENCY: Final = 16


class Scan(NamedTuple):
    """What :func:`scan_entities` read: the entities, and whether that was all of them."""

    entities: tuple[EntitySnapshot, ...]
    #: how many entities the server said match (``len(entities)`` when it did not say)
    total: int
    #: the first offset the server refused (it caps how deep offsets go); ``None``: none was
    refused_offset: int | None = None

    @property
    def partial(self) -> bool:
        """True when the server stopped paging before every match was read."""
        return self.refused_offset is not None


async def scan_entities(
    transport: Transport,
    *,
    entity_type: str | None = None,
    search: str | None = None,
    page_size: int = PAGE_SIZE,
    concurrency: int = 1,
) -> Scan:
    """Every entity matching the query (of ``entity_type``, if given), each once, in order.

    Cursor paging when the first page carries ``next_cursor``; otherwise offsets, planned
    from the first page's ``total`` and size (the server's page size, which may be below
    ``page_size``) and read ``concurrency`` at a time, or read on until a short page when
    there is no total. A refused first page is raised; a refused later offset ends the scan
    as :attr:`Scan.partial`.
    """
    first = await transport.query_entities(
        entity_type=entity_type, search=search, limit=page_size, offset=0
    )
    pages: dict[int, Sequence[EntitySnapshot]] = {0: first.entities}
    step = len(first.entities)
    refused: list[int] = []

    async def page(offset: int) -> None:
        try:
            result = await transport.query_entities(
                entity_type=entity_type, search=search, limit=step, offset=offset
            )
        except ValidationError:
            refused.append(offset)
            return
        pages[offset] = result.entities

    if "next_cursor" in first.raw:
        result = first
        while result.next_cursor is not None:
            result = await transport.query_entities(
                entity_type=entity_type, search=search, limit=page_size, cursor=result.next_cursor
            )
            pages[max(pages) + step] = result.entities
    elif step and "total" in first.raw:
        offsets = range(step, first.total, step)
        await gather_bounded([functools.partial(page, o) for o in offsets], concurrency)
    elif step:
        # No total to plan by: read on until a short page.
        while not refused and len(pages[max(pages)]) >= step:
            await page(max(pages) + step)
    seen: dict[str, EntitySnapshot] = {}
    for offset in sorted(pages):
        for entity in pages[offset]:
            if entity_type is None or entity.entity_type == entity_type:
                seen.setdefault(entity.entity_id, entity)
    # Not logged here: each reader says "partial" in its own words (and its own log event).
    total = first.total if "total" in first.raw else len(seen)
    return Scan(tuple(seen.values()), total, min(refused) if refused else None)


async def gather_bounded(
    calls: Sequence[Callable[[], Awaitable[T]]], limit: int = READ_CONCURRENCY
) -> list[T]:
    """Await every call, at most ``limit`` at a time; results in order.

    The first failure cancels the rest and is raised as it is (not in an exception group),
    so that the caller can explain it.
    """
    # Imported here: a hook opening a turn on a store file reads history through this
    # module without an event loop (``_recall.history.paged_history``).
    import anyio

    if limit < 1:
        raise ValueError("limit must be >= 1")
    results: list[Any] = [None] * len(calls)
    failure: list[BaseException] = []
    pending = iter(enumerate(calls))

    async def worker(scope: anyio.CancelScope) -> None:
        # One shared iterator: each call is taken once, and no more than `limit` tasks
        # exist however many calls there are.
        for index, call in pending:
            try:
                results[index] = await call()
            except Exception as exc:
                failure.append(exc)
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        for _ in range(min(limit, len(calls))):
            tg.start_soon(worker, tg.cancel_scope)
    if failure:
        raise failure[0]
    return results


async def snapshot_or_none(transport: Transport, entity_id: str) -> EntitySnapshot | None:
    """The entity's snapshot, or ``None`` when the store has no such entity."""
    try:
        return await transport.get_entity_snapshot(entity_id)
    except NotFoundError:
        return None
