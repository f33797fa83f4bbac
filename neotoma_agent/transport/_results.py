"""The typed results every transport returns, parsed from the JSON a Neotoma server sends.

Both transports produce that JSON and parse it with the same ``from_json`` constructors, so
code written against one runs unchanged on the other. Every result keeps the decoded JSON as
``.raw`` for the fields we do not model.

Here are the answers a turn reads: a store's, a lookup's, a history page's. The answers of
the calls a turn never makes (queries, observations, relationships, corrections,
conversation lists) are in :mod:`._query_results`, so that a process that only runs turns
(a coding-agent hook, a fresh process per event) does not build them. All are re-exported
by :mod:`._base`, beside the protocols that return them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import attrs

from .._neotoma.identity import IdentityError, resolve_identity
from .._util.deferred import Deferring, defer
from ._packed_calls import TOOL_CALLS, sends_tool_calls, unpack_tool_calls

_EMPTY: Mapping[str, Any] = {}


# Decoded JSON is made of plain dicts: ``type(v) is dict`` answers first, because
# ``isinstance(v, Mapping)`` goes through the ABC machinery (tens of calls per message).


def _map(value: object) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    # None (a field not sent) answers before the ABC check too.
    return value if value is not None and isinstance(value, Mapping) else _EMPTY


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: object) -> int | None:
    if type(value) is int:
        return value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _items(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list) or not value:
        return []
    return [v for v in value if type(v) is dict or isinstance(v, Mapping)]


@attrs.frozen
class StoredEntity:
    """One entity of a ``store`` answer, aligned to the request element it came from."""

    entity_id: str
    entity_type: str
    observation_id: str | None
    #: index of the request element; ``None`` only on a replay the transport could not align
    observation_index: int | None
    #: ``created | matched_existing | extended`` (``None`` on a replay: nothing was written)
    action: str | None
    canonical_name: str | None
    snapshot: Mapping[str, Any] | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StoredEntity:
        # Read for every entity of every store answer: positional, no helper calls for the
        # shapes a store sends (strings, an int index).
        get = raw.get
        eid, etype, oid = get("entity_id", ""), get("entity_type", ""), get("observation_id")
        index, action, name = get("observation_index"), get("action"), get("canonical_name")
        snap = get("entity_snapshot_after")
        return cls(
            eid if type(eid) is str else str(eid),
            etype if type(etype) is str else str(etype),
            oid if isinstance(oid, str) else None,
            index if type(index) is int else _opt_int(index),
            action if isinstance(action, str) else None,
            name if isinstance(name, str) else None,
            snap if type(snap) is dict or isinstance(snap, Mapping) else None,
            raw,
        )


class _ByIndex(Deferring):
    """Adds the slot where a store answer keeps its request-index -> entity-id map (a cache
    outside the attrs fields: not compared, copied or pickled; rebuilt when missing)."""

    __slots__ = ("_by_index",)


@attrs.frozen
class StoreResult(_ByIndex):
    """The answer to ``store``: ``entities`` in request order, whether fresh or replayed.

    Parsed from a store answer, ``entities`` is built from :attr:`raw` on its first read:
    a closing store answers one entry per tool call, and a turn reads only a few ids,
    through :meth:`entity_id`, which reads them off the answer. The same value, whenever
    it is read.
    """

    replayed: bool
    source_id: str | None
    entities: tuple[StoredEntity, ...]
    entities_created: int
    observations_created: int
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)
    #: not stored yet: an outbox queued it (the inner transport was unreachable); the
    #: entities carry the ids the server will give them, and no observation ids
    queued: bool = False

    @classmethod
    def from_json(
        cls, raw: Mapping[str, Any], request_entities: Sequence[Mapping[str, Any]] | None = None
    ) -> StoreResult:
        """Parse a store answer; with ``request_entities``, align entries to the request.

        A fresh answer carries ``observation_index``. A replay lists the source's observations
        newest first with no index, so entries are matched to request elements by entity id
        (computed the way the server does) and never by position.
        """
        items = _items(raw.get("entities"))
        result = cls(
            bool(raw.get("replayed", False)),
            _opt_str(raw.get("source_id")),
            (),
            _opt_int(raw.get("entities_created")) or 0,
            _opt_int(raw.get("observations_created")) or 0,
            raw,
        )
        ids = _fresh_ids(items)
        if ids is not None:
            object.__setattr__(result, "_by_index", ids)
        return defer(result, "entities", functools.partial(_entries, items, request_entities))

    @classmethod
    def _answered(
        cls,
        make_raw: Callable[[], Mapping[str, Any]],
        request_entities: Sequence[Mapping[str, Any]],
        *,
        source_id: str,
        created: int,
        observations: int,
        by_index: dict[int, str],
    ) -> StoreResult:
        """A fresh store's answer made where it was stored (the embedded store's thread):
        ``make_raw()`` gives the answer's JSON, :attr:`raw`, on its first read, and
        :attr:`entities` is parsed from it then, as :meth:`from_json` parses it; the
        counts and the ids by request index (``entity_id``) are given. The same values as
        ``from_json(make_raw(), request_entities)``, whenever they are read."""
        # Positional, in the fields' order (replayed, source_id, entities, the two counts,
        # raw): keyword arguments cost their matching on every store.
        result = cls(False, source_id, (), created, observations, _EMPTY)
        object.__setattr__(result, "_by_index", by_index)
        defer(result, "raw", make_raw)

        def entries() -> tuple[StoredEntity, ...]:
            return _entries(_items(result.raw.get("entities")), request_entities)

        return defer(result, "entities", entries)

    def entity_id(self, index: int) -> str:
        """The entity id stored for request element ``index``."""
        try:
            by_index: dict[int, str] = object.__getattribute__(self, "_by_index")
        except AttributeError:
            by_index = {}
            for e in self.entities:
                if e.observation_index is not None:
                    by_index.setdefault(e.observation_index, e.entity_id)
            object.__setattr__(self, "_by_index", by_index)
        try:
            return by_index[index]
        except KeyError:
            raise IndexError(f"no stored entity for request element {index}") from None


def _entries(
    items: list[Mapping[str, Any]], request: Sequence[Mapping[str, Any]] | None
) -> tuple[StoredEntity, ...]:
    entries = [StoredEntity.from_json(e) for e in items]
    return tuple(entries if request is None else _align(entries, request))


def _fresh_ids(items: list[Mapping[str, Any]]) -> dict[int, str] | None:
    """Request index -> entity id, read off a fresh answer's entries (each a dict with an
    int ``observation_index``); ``None`` for any other answer (a replay, odd shapes).

    What :meth:`StoreResult.entity_id` answers from the entries: aligning a fresh answer
    only sorts it by index (stably), so the first entry of an index in the answer's own
    order is the first in the aligned one.
    """
    ids: dict[int, str] = {}
    for item in items:
        if type(item) is not dict:
            return None
        index = item.get("observation_index")
        if type(index) is not int:
            return None
        if index not in ids:
            eid = item.get("entity_id", "")
            ids[index] = eid if type(eid) is str else str(eid)
    return ids


def expected_entity(element: Mapping[str, Any], index: int) -> StoredEntity | None:
    """The entity a store answers for request element ``index``, derived as the server does.

    ``target_id`` names it; else the type's identity rules give its id and canonical name.
    ``None`` when the element has no identity (the store would refuse it). Nothing a write
    reports (observation, action, snapshot) is known.
    """
    entity_type = str(element.get("entity_type", ""))
    target = element.get("target_id")
    entity_id: str | None = target if isinstance(target, str) else None
    name: str | None = None
    if entity_id is None:
        fields = {k: v for k, v in element.items() if k not in ("entity_type", "intent")}
        try:
            identity = resolve_identity(entity_type, fields)
        except IdentityError:
            return None
        entity_id, name = identity.entity_id, identity.canonical_name
    return StoredEntity(entity_id, entity_type, None, index, None, name, None, raw={})


def _align(entries: list[StoredEntity], request: Sequence[Mapping[str, Any]]) -> list[StoredEntity]:
    indexes = [e.observation_index for e in entries]
    if entries and None not in indexes:
        # A fresh answer lists them in request order already (the stable sort would keep it).
        ints = cast("list[int]", indexes)
        if ints == sorted(ints):
            return entries
        return sorted(entries, key=lambda e: e.observation_index or 0)
    # Replay: derive each request element's id as the server would, then match by id.
    by_id: dict[str, StoredEntity] = {e.entity_id: e for e in entries}
    aligned: list[StoredEntity] = []
    for index, element in enumerate(request):
        expected = expected_entity(element, index)
        match = by_id.get(expected.entity_id) if expected and expected.entity_id else None
        if match is not None:
            aligned.append(attrs.evolve(match, observation_index=index))
    return aligned


def display_name(entity_type: str, canonical_name: str | None) -> str | None:
    """``canonical_name`` as a user reads it: without a ``type:`` prefix, parts spaced.

    A name the store derived from a schema rule is ``"<type>:<part>|<part>"``
    (``person:Hank Scorpio``); any other canonical name is shown as it is.
    """
    if not canonical_name:
        return None
    prefix = f"{entity_type}:"
    if entity_type and canonical_name.startswith(prefix) and len(canonical_name) > len(prefix):
        return " ".join(canonical_name[len(prefix) :].split("|"))
    return canonical_name


@attrs.frozen
class Entity:
    """An entity as a lookup or a related-entities read returns it."""

    id: str
    entity_type: str
    canonical_name: str | None
    #: the plain field map (whichever of the server's two shapes it came in)
    snapshot: Mapping[str, Any]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @property
    def entity_id(self) -> str:
        """Alias of :attr:`id`."""
        return self.id

    @property
    def name(self) -> str:
        """The name to show a user: ``Globex``, ``Hank Scorpio``.

        The first of the snapshot's ``name``, ``title``, ``full_name``, ``first_name`` +
        ``last_name`` and ``email``; else :attr:`canonical_name` without the ``type:``
        prefix the store gives schema-derived names (``person:Hank Scorpio`` shows as
        ``Hank Scorpio``; the parts of a composite name joined by a space); else the id.
        :attr:`canonical_name` stays the store's own key, for matching, not for display.
        """
        key = self.name_field
        if key is not None:
            return str(self.snapshot[key])
        parts = self._name_parts()
        if parts:
            return " ".join(parts)
        return display_name(self.entity_type, self.canonical_name) or self.id

    def _name_parts(self) -> list[str]:
        first, last = self.snapshot.get("first_name"), self.snapshot.get("last_name")
        return [p.strip() for p in (first, last) if isinstance(p, str) and p.strip()]

    @property
    def name_field(self) -> str | None:
        """The snapshot field :attr:`name` shows (``None``: it shows the canonical name)."""
        for key in ("name", "title", "full_name", "email"):
            value = self.snapshot.get(key)
            if isinstance(value, str) and value:
                if key == "email" and self._name_parts():
                    return None  # the name is first + last; the email stays a field
                return key
        return None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Entity:
        # Lookups send `id`; some reads (and older clients' assumptions) use `entity_id`.
        entity_id = raw.get("id") or raw.get("entity_id") or ""
        snap = raw.get("snapshot")
        fields: Mapping[str, Any] = _EMPTY
        if isinstance(snap, Mapping):
            inner = snap.get("snapshot")
            # direct mode nests the snapshot record; snapshot_field mode sends the field map
            fields = inner if isinstance(inner, Mapping) and "entity_id" in snap else snap
        return cls(
            id=str(entity_id),
            entity_type=str(raw.get("entity_type", "")),
            canonical_name=_opt_str(raw.get("canonical_name")),
            snapshot=fields,
            raw=raw,
        )


def _deleted_item(item: Mapping[str, Any]) -> bool:
    return "snapshot" in item and item["snapshot"] is None


@attrs.frozen
class LookupResult:
    """The answer to ``retrieve_entity_by_identifier``."""

    entities: tuple[Entity, ...]
    total: int
    #: ``direct | snapshot_field | semantic | none``
    match_mode: str
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LookupResult:
        items = _items(raw.get("entities"))
        # A real server (0.22.0) still answers a soft-deleted entity here, with
        # ``"snapshot": null`` (a live entity always has one): it is not found.
        live = [e for e in items if not _deleted_item(e)]
        entities = tuple(Entity.from_json(e) for e in live)
        return cls(
            entities=entities,
            total=len(entities)
            if len(live) < len(items)
            else (_opt_int(raw.get("total")) or len(entities)),
            match_mode=str(raw.get("match_mode", "none")),
            raw=raw,
        )


@attrs.frozen
class EntitySnapshot:
    """The reduced state of one entity (``get_entity_snapshot``, ``query_entities`` items)."""

    entity_id: str
    entity_type: str
    canonical_name: str | None
    snapshot: Mapping[str, Any]
    observation_count: int
    last_observation_at: str | None
    provenance: Mapping[str, Any]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EntitySnapshot:
        # Read for every turn record of every history page: positional, one lookup each.
        get = raw.get
        name, observed = get("canonical_name"), get("last_observation_at")
        return cls(
            str(get("entity_id") or get("id") or ""),
            str(get("entity_type", "")),
            name if isinstance(name, str) else None,
            _map(get("snapshot")),
            _opt_int(get("observation_count")) or 0,
            observed if isinstance(observed, str) else None,
            _map(get("provenance")),
            raw,
        )


@attrs.frozen
class RelatedEntity:
    """One non-PART_OF edge of a message, as ``GET /recent_conversations/{id}`` lists it."""

    entity_id: str
    entity_type: str
    canonical_name: str | None
    #: the far end's display name (its ``title`` / ``name``), else its canonical name
    title: str | None
    relationship_type: str

    @property
    def name(self) -> str:
        """A display name: :attr:`title`, else the canonical name, else the id."""
        return self.title or self.canonical_name or self.entity_id

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RelatedEntity:
        return cls(
            entity_id=str(raw.get("entity_id", "")),
            entity_type=str(raw.get("entity_type", "")),
            canonical_name=_opt_str(raw.get("canonical_name")),
            title=_opt_str(raw.get("title")),
            relationship_type=str(raw.get("relationship_type", "")),
        )


@attrs.frozen
class ConversationMessage:
    """One message of a conversation, as ``GET /recent_conversations/{id}`` lists it."""

    message_id: str
    role: str | None
    #: the exact content (``None`` if the store holds none)
    content: str | None
    turn_key: str | None
    #: the latest of the message's last observation, update and creation
    activity_at: str
    related: tuple[RelatedEntity, ...]
    #: sent only by stores that page (the dev server's extension); a real server omits it
    turn_number: int | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @property
    def refers_to(self) -> tuple[str, ...]:
        """The ids this message REFERS_TO, in the order listed."""
        if not self.related:
            return ()  # most messages name nothing: read for each of every history page
        ids = (r.entity_id for r in self.related if r.relationship_type == "REFERS_TO")
        return tuple(dict.fromkeys(ids))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ConversationMessage:
        # Read for every message of every history page: positional, no helper calls for
        # the common shapes (plain strings, no edges).
        get = raw.get
        role, content, turn_key = get("role"), get("content"), get("turn_key")
        related = get("related_entities")
        return cls(
            str(get("message_id") or get("entity_id") or ""),
            role if isinstance(role, str) else None,
            content if isinstance(content, str) else None,
            turn_key if isinstance(turn_key, str) else None,
            str(get("activity_at") or ""),
            tuple(RelatedEntity.from_json(r) for r in _items(related)) if related else (),
            _opt_int(get("turn_number")),
            raw,
        )


@attrs.frozen
class RecentConversation(Deferring):
    """The answer to ``recent_conversation``: a conversation and its messages.

    A real server sends every message, in activity order. A store that honours the
    ``limit`` / ``before`` extension (the embedded store, the dev server) sends a page in
    write order and says so: ``has_more`` is then a bool (``None`` from a real server) and
    ``turn_records`` the snapshots of the page's turn records (``None`` when not sent).
    ``tool_calls`` is parsed from :attr:`raw` on its first read (a history read rarely
    needs it): the same value, whenever it is read.
    """

    #: the conversation's entity id (the answer's ``conversation_id``)
    entity_id: str
    canonical_name: str | None
    title: str | None
    activity_at: str
    message_count: int
    messages: tuple[ConversationMessage, ...]
    has_more: bool | None
    turn_records: tuple[EntitySnapshot, ...] | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)
    #: the snapshots of the tool calls those turn records REFER_TO (``None`` when not sent)
    tool_calls: tuple[EntitySnapshot, ...] | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RecentConversation:
        records = raw.get("turn_records")
        message = ConversationMessage.from_json
        record = EntitySnapshot.from_json
        return cls._of(
            raw,
            tuple([message(m) for m in _items(raw.get("messages"))]),
            None if not isinstance(records, list) else tuple([record(r) for r in _items(records)]),
        )

    @classmethod
    def _of(
        cls,
        raw: Mapping[str, Any],
        messages: tuple[ConversationMessage, ...],
        turn_records: tuple[EntitySnapshot, ...] | None,
    ) -> RecentConversation:
        """The page ``raw`` with its ``messages`` and ``turn_records`` parsed already (as
        :meth:`from_json` parses them: the embedded store makes them from its rows)."""
        more = raw.get("has_more")
        page = cls(
            entity_id=str(raw.get("conversation_id") or ""),
            canonical_name=_opt_str(raw.get("canonical_name")),
            title=_opt_str(raw.get("title")),
            activity_at=str(raw.get("activity_at") or ""),
            message_count=_opt_int(raw.get("message_count")) or 0,
            messages=messages,
            has_more=more if isinstance(more, bool) else None,
            turn_records=turn_records,
            raw=raw,
        )
        if sends_tool_calls(raw):
            defer(page, "tool_calls", functools.partial(_snapshots, raw))
        return page


def _snapshots(raw: Mapping[str, Any]) -> tuple[EntitySnapshot, ...]:
    # raw[TOOL_CALLS] read here, when the calls are: an HTTP answer may decode it only then.
    return tuple([EntitySnapshot.from_json(c) for c in unpack_tool_calls(raw[TOOL_CALLS])])
