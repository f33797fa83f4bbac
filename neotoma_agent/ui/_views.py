"""What each page of the web view shows, as JSON-plain data (each page's JSON twin).

The pages read through the library's own readers, as the command line does: the history
reader (``show``, ``t.history``), the stats count (``stats``), the audit (``audit``), the
turn record reader (how a turn ended) and the outbox status. So a page and the command's
``--json`` cannot disagree: a conversation's turns here have the keys ``show --json``
prints, the health page carries ``stats --json`` and ``audit --json`` whole.

Every function returns plain dicts and lists (strings exactly as stored): escaping is the
templates' job, never done here, so the JSON twin holds the exact text.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Final, TypeVar

import anyio
import attrs

from .. import Entity, SummaryReader, Transport, outbox_status
from ..exceptions import NeotomaError, NotFoundError
from ..qa import audit
from ..reads import (
    BOOKKEEPING_TYPES,
    StoredTurn,
    TurnView,
    collect_stats,
    conversation_entity_id,
    gather_bounded,
    list_conversations,
    parse_turn_key,
    read_conversation,
    scan_entities,
    snapshot_or_none,
    stored_platform,
    tenant_for,
    turn_ending,
)

__all__ = [
    "CONVERSATIONS_PER_PAGE",
    "TURNS_PER_PAGE",
    "conversation_view",
    "conversations_view",
    "entity_view",
    "health_view",
    "search_view",
]

A = TypeVar("A")
B = TypeVar("B")

#: conversations on one page of the list
CONVERSATIONS_PER_PAGE: Final = 25
#: turns of each listed conversation whose statuses the list counts (its latest ones)
_COUNTED_TURNS: Final = 100
#: the shortest text a name search finds (the stores index names by trigram)
_MIN_SEARCH: Final = 3
#: turns on one page of a conversation (older turns are one link away)
TURNS_PER_PAGE: Final = 50
#: observations and relationships an entity page lists at most
_ENTITY_ROWS: Final = 200
#: how a conversation message's canonical name starts (the schema rule ``type:turn_key``)
_MESSAGE_NAME_PREFIX: Final = "conversation_message:"
#: days the health chart covers, ending at the latest day with a turn
_CHART_DAYS: Final = 30


async def _turn_counts(transport: Transport, conversation_id: str) -> dict[str, Any]:
    # The last _COUNTED_TURNS turns only: a list page must not read a long conversation
    # whole (stats and the health page count every turn).
    stored = await read_conversation(transport, conversation_id, limit=_COUNTED_TURNS + 1)
    turns = stored.turns[-_COUNTED_TURNS:]
    counts = Counter(t.status for t in turns)
    return {
        "turns": len(turns),
        "more_turns": len(stored.turns) > _COUNTED_TURNS,
        "completed": counts["completed"],
        "abandoned": counts["abandoned"],
        "open": counts["open"],
    }


async def _record_counts(transport: Transport, conversation_id: str) -> dict[str, Any]:
    """The conversation's turn records counted by status, found by one search for its id
    (a record's name holds it; a real Neotoma server answers in one request, or a few pages,
    however long the conversation); the latest 100 turns read instead where the search
    cannot serve (an id shorter than a trigram, a server that refuses the search).
    ``more_turns``: the server stopped the search's paging before the last record."""
    if len(conversation_id) >= _MIN_SEARCH:
        try:
            scan = await scan_entities(
                transport, entity_type="conversation_turn", search=conversation_id
            )
        except (NeotomaError, NotImplementedError):
            scan = None
        if scan is not None:
            # The search matches substrings (and, on a real server, snapshot text): the
            # records are the ones whose session is exactly this conversation.
            statuses = Counter(
                e.snapshot.get("status")
                for e in scan.entities
                if e.snapshot.get("session_id") == conversation_id
            )
            return {
                "turns": statuses.total(),
                "more_turns": scan.partial,
                "completed": statuses["completed"],
                "abandoned": statuses["abandoned"],
                "open": statuses["open"],
            }
    return await _turn_counts(transport, conversation_id)


def _cursor(last_activity: str | None, conversation_id: str) -> str:
    # The summary route's cursor form (when|id): one cursor, whichever path made the page.
    return f"{last_activity or ''}|{conversation_id}"


def _key(cursor: str) -> tuple[str, str]:
    when, sep, conversation_id = cursor.partition("|")
    if not sep:
        raise ValueError("not a conversations cursor")
    return when, conversation_id


async def _summary_page(reader: SummaryReader, after: str | None) -> dict[str, Any] | None:
    """The page from the store's summary (one indexed read); ``None``: it keeps none."""
    try:
        page = await reader.conversation_summaries(limit=CONVERSATIONS_PER_PAGE, after=after)
    except (NotFoundError, NotImplementedError):
        return None  # a real Neotoma server, or a wrapper around a store without it
    items = [{**attrs.asdict(i), "more_turns": False} for i in page.items]
    return {
        "conversations": [_ordered(i) for i in items],
        "total": page.total,
        "next": page.next,
        "after": after,
        "partial": False,
        "note": "",
    }


_ITEM_KEYS: Final = (
    "conversation_id",
    "entity_id",
    "title",
    "platform",
    "last_activity",
    "turns",
    "more_turns",
    "completed",
    "abandoned",
    "open",
)


def _ordered(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in _ITEM_KEYS}


async def _listed_page(transport: Transport, after: str | None) -> dict[str, Any]:
    """The page from ``show``'s list (a store without a summary: a real Neotoma server).

    Every conversation's snapshot is read (paged by cursor where the server offers it, else
    by offset up to the server's cap: ``partial``), then the page's conversations' turn
    records are counted (:func:`_record_counts`: a search each, or their latest 100 turns).
    """
    listing = await list_conversations(transport)
    ordered = listing.conversations
    if after is not None:
        bound = _key(after)
        ordered = tuple(c for c in ordered if (c.last_activity or "", c.conversation_id) < bound)
    shown = ordered[:CONVERSATIONS_PER_PAGE]
    counts = await gather_bounded(
        [functools.partial(_record_counts, transport, c.conversation_id) for c in shown]
    )
    # The platform from the snapshots the list was read from (no read per conversation).
    fields = {e.entity_id: e.snapshot for e in listing.scan.entities}
    items = []
    for summary, count in zip(shown, counts, strict=True):
        item = {
            "conversation_id": summary.conversation_id,
            "entity_id": summary.entity_id,
            "title": summary.title,
            "platform": stored_platform(fields.get(summary.entity_id, {})),
            "last_activity": summary.last_activity,
            **count,
        }
        items.append(_ordered(item))
    last = shown[-1] if shown else None
    more = len(ordered) > len(shown)
    return {
        "conversations": items,
        "total": listing.total,
        "next": _cursor(last.last_activity, last.conversation_id) if more and last else None,
        "after": after,
        "partial": listing.partial,
        "note": listing.note(),
    }


async def conversations_view(
    transport: Transport, *, after: str | None = None, summaries: bool = True
) -> dict[str, Any]:
    """The conversations, most recent activity first, one page of them with turn counts.

    ``after``: the ``next`` of the previous page (keyset paging on last activity, then
    conversation id). From the store's per-conversation summary where it keeps one (the
    embedded store, the dev server: one indexed read, every turn counted); else from
    ``show``'s list, with each listed conversation's turn records counted by a search for
    its id (``more_turns``: the server would not page the search to its end).
    ``summaries=False`` takes the second path anyway (the tests' and the benchmark's
    comparison).
    """
    if after is not None:
        _key(after)  # a malformed cursor is refused the same way on both paths
    if summaries and isinstance(transport, SummaryReader):
        page = await _summary_page(transport, after)
        if page is not None:
            return page
    return await _listed_page(transport, after)


def _record_fields(turn: StoredTurn) -> dict[str, Any]:
    # Timings and the like, when the turn record declares them (written by newer versions).
    if turn.record is None:
        return {}
    fields = turn.record.snapshot
    keep = ("started_at", "ended_at", "model", "harness", "tool_invocation_count")
    return {k: fields[k] for k in keep if k in fields}


async def conversation_view(
    transport: Transport, conversation_id: str, *, before: str | None = None
) -> dict[str, Any] | None:
    """One page of a conversation's turns (the last :data:`TURNS_PER_PAGE` before
    ``before``, oldest first), each as ``show --json`` prints it; ``None``: no such
    conversation.

    ``older`` is the ``before`` of the previous page (``None`` on the first turn).
    """
    # With each call's details (arguments, result, call id, turn), as `show --json` reads
    # them: one observation read per call, which a page of a few turns affords.
    stored = await read_conversation(
        transport, conversation_id, limit=TURNS_PER_PAGE + 1, before=before, tool_details=True
    )
    if stored.snapshot is None:
        return None
    turns = stored.turns
    older = None
    if len(turns) > TURNS_PER_PAGE:
        turns = turns[1:]
        older = turns[0].turn_id
    endings = await gather_bounded([functools.partial(turn_ending, transport, t) for t in turns])
    views = []
    for turn, ending in zip(turns, endings, strict=True):
        view = TurnView.of(turn, ending, position=0).to_json()
        # One numbering: the stored turn number, or none (a page does not know positions).
        view["turn"] = turn.turn_number
        view["reason"] = ending.reason if ending is not None else None
        view["record"] = _record_fields(turn)
        views.append(view)
    fields = stored.snapshot.snapshot
    title = fields.get("title")
    return {
        "conversation_id": conversation_id,
        "conversation_entity_id": stored.conversation_entity_id,
        "title": title if isinstance(title, str) else None,
        "platform": stored_platform(fields),
        "turns": views,
        "older": older,
        "before": before,
    }


async def _both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Two reads at once (one round trip's wait, not two)."""
    results: list[Any] = [None, None]

    async def run(index: int, read: Awaitable[Any]) -> None:
        results[index] = await read

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, first)
        tg.start_soon(run, 1, second)
    return results[0], results[1]


def _edge_json(edge: Any) -> dict[str, Any]:
    return {
        "relationship_type": edge.relationship_type,
        "source_entity_id": edge.source_entity_id,
        "target_entity_id": edge.target_entity_id,
    }


async def _related_names(
    transport: Transport, related: Sequence[Entity], shown: Sequence[Any]
) -> dict[str, dict[str, str]]:
    """Each related entity's type and display name (``Ana Lopez``, ``Acme Corp``).

    A relationship read names its entities by canonical name only (``ana.lopez@acme.com``,
    ``Acme``): the snapshots of the ones the page shows give their display names, as
    everywhere else. A turn's own entities (messages, turn records) show their canonical
    names, which hold their turn keys.
    """
    ends = {end for r in shown for end in (r.source_entity_id, r.target_entity_id)}
    wanted = [e for e in related if e.id in ends and e.entity_type not in BOOKKEEPING_TYPES]
    snapshots = await gather_bounded(
        [functools.partial(snapshot_or_none, transport, e.id) for e in wanted]
    )
    named = {
        e.id: attrs.evolve(e, snapshot=s.snapshot)
        for e, s in zip(wanted, snapshots, strict=True)
        if s is not None
    }
    return {e.id: {"entity_type": e.entity_type, "name": named.get(e.id, e).name} for e in related}


async def entity_view(transport: Transport, entity_id: str) -> dict[str, Any] | None:
    """An entity: its snapshot, observations, relationships, and the turns that referred to
    it (the REFERS_TO edges from conversation messages); ``None``: no such entity."""
    snapshot = await snapshot_or_none(transport, entity_id)
    if snapshot is None:
        return None
    observations, related = await _both(
        transport.list_observations(entity_id, limit=_ENTITY_ROWS),
        transport.retrieve_related_entities(entity_id),
    )
    names = {e.id: e for e in related.entities}
    referred: dict[tuple[str, str], list[str]] = {}
    for edge in related.relationships:
        if edge.relationship_type != "REFERS_TO" or edge.target_entity_id != entity_id:
            continue
        source = names.get(edge.source_entity_id)
        if source is None or source.entity_type != "conversation_message":
            continue
        turn_key = source.snapshot.get("turn_key")
        if not isinstance(turn_key, str):
            # Related entities come without fields; a message's canonical name holds its key.
            name = source.canonical_name or ""
            turn_key = name.removeprefix(_MESSAGE_NAME_PREFIX) if name != turn_key else None
        parsed = parse_turn_key(turn_key) if isinstance(turn_key, str) and turn_key else None
        if parsed is None:
            continue
        cid, tid, role = parsed
        roles = referred.setdefault((cid, tid), [])
        if role not in roles:
            roles.append(role)
    shown = related.relationships[:_ENTITY_ROWS]
    return {
        "entity_id": snapshot.entity_id,
        "entity_type": snapshot.entity_type,
        "canonical_name": snapshot.canonical_name,
        "snapshot": dict(snapshot.snapshot),
        "observation_count": snapshot.observation_count,
        "last_observation_at": snapshot.last_observation_at,
        "observations": [
            {
                "id": o.id,
                "observed_at": o.observed_at,
                "source_id": o.source_id,
                "observation_source": o.observation_source,
                "source_priority": o.source_priority,
                "fields": dict(o.fields),
            }
            for o in observations.observations
        ],
        "relationships": [_edge_json(r) for r in shown],
        "related": await _related_names(transport, related.entities, shown),
        "referred_by": [
            {"conversation_id": cid, "turn_id": tid, "roles": sorted(roles, reverse=True)}
            for (cid, tid), roles in sorted(referred.items())
        ],
    }


async def search_view(transport: Transport, query: str, *, limit: int = 25) -> dict[str, Any]:
    """Entities a lookup by identifier finds (as retrieval looks them up), and the
    conversation of that id if there is one."""
    query = query.strip()
    if not query:
        return {"query": query, "entities": [], "conversation_id": None}
    found = await transport.retrieve_entity_by_identifier(query, limit=limit)
    entity_id = conversation_entity_id(query, tenant=tenant_for(transport))
    conversation = await snapshot_or_none(transport, entity_id)
    return {
        "query": query,
        "entities": [
            {"entity_id": e.id, "entity_type": e.entity_type, "name": e.name}
            for e in found.entities
        ],
        "conversation_id": query
        if conversation is not None and conversation.entity_type == "conversation"
        else None,
    }


def _day(stamp: str | None) -> str | None:
    if not stamp or len(stamp) < 10:
        return None
    try:
        datetime.date.fromisoformat(stamp[:10])
    except ValueError:
        return None
    return stamp[:10]


def _chart(days: Counter[str], abandoned: Counter[str]) -> list[dict[str, Any]]:
    if not days:
        return []
    last = datetime.date.fromisoformat(max(days))
    out = []
    for back in range(_CHART_DAYS - 1, -1, -1):
        day = (last - datetime.timedelta(days=back)).isoformat()
        out.append({"day": day, "turns": days[day], "abandoned": abandoned[day]})
    return out


async def _turns_per_day(transport: Transport) -> list[dict[str, Any]]:
    # The day each turn record was last written (a turn's close), over the last days.
    scan = await scan_entities(transport, entity_type="conversation_turn")
    days: Counter[str] = Counter()
    abandoned: Counter[str] = Counter()
    for record in scan.entities:
        day = _day(record.last_observation_at)
        if day is None:
            continue
        days[day] += 1
        if record.snapshot.get("status") == "abandoned":
            abandoned[day] += 1
    return _chart(days, abandoned)


async def health_view(
    transport: Transport,
    *,
    run_audit: bool = False,
    outbox: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """What ``stats`` counts, turns per day with the abandoned share, the audit's findings
    (read-only, only when asked: it reads every turn) and the outbox's queue."""
    stats = await collect_stats(transport)
    chart = await _turns_per_day(transport)
    report = await audit(transport) if run_audit else None
    queue: Mapping[str, Any] | None = None
    if outbox is not None:
        try:
            queue = outbox_status(outbox).to_json()
        except FileNotFoundError:
            queue = {"missing": True, "path": os.fspath(outbox)}
    return {
        "stats": stats.to_json(),
        "turns_per_day": chart,
        "audit": report.to_json() if report is not None else None,
        "outbox": queue,
    }


#: a day label every this many bars, counted back from the last day (a label is wider than
#: two bars: labels closer than this would overlap)
_LABEL_EVERY: Final = 7


def chart_bars(days: Sequence[Mapping[str, Any]], *, height: int = 120) -> list[dict[str, Any]]:
    """The health chart's bars: each day's turns and abandoned turns scaled to ``height``,
    and its label (``MM-DD``) on the last day and every week before it, else ``None``."""
    top = max((d["turns"] for d in days), default=0) or 1
    last = len(days) - 1
    return [
        {
            **d,
            "total_h": round(d["turns"] * height / top),
            "abandoned_h": round(d["abandoned"] * height / top),
            "label": d["day"][5:] if (last - i) % _LABEL_EVERY == 0 else None,
        }
        for i, d in enumerate(days)
    ]
