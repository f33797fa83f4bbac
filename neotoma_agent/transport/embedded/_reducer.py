"""Incremental snapshot reduction: fold one new observation into an entity's snapshot.

A real Neotoma server recomputes a snapshot from every observation of the entity after each
write, so the cost of a write grows with the entity's history (a long conversation gets
slower turn by turn). Each merge policy is a total order over observations, so it is enough
to remember, per field, the winning observation's sort key: a new observation competes only
with the current winner. The result equals a full recomputation (tests check that).
Only the fields a type's schema declares reach its snapshot, as on the server.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..._neotoma.identity import LAST_WRITE, MergePolicy, TypeSchema

__all__ = [
    "ObservationMeta",
    "SnapshotChange",
    "SnapshotState",
    "fold",
    "renumber",
    "sets_as_given",
    "source_rank",
]

# Observation-source rank for highest_priority ties: lower is more trusted; missing last.
_SOURCE_RANK = {
    name: rank
    for rank, name in enumerate(
        ("sensor", "workflow_state", "llm_summary", "human", "import", "sync")
    )
}


def source_rank(observation_source: str | None) -> int:
    """The rank of an observation source in the default trust order (lower wins)."""
    if observation_source is None:
        return len(_SOURCE_RANK)
    return _SOURCE_RANK.get(observation_source, len(_SOURCE_RANK))


# Plain records, not attrs: every process that writes the store file builds them (a
# coding-agent hook, a fresh process per event, among them), and they validate nothing.


class ObservationMeta(NamedTuple):
    """What the reducer needs to know about an observation to rank it."""

    id: str
    # insertion order: breaks ties between observations of the same millisecond (a turn
    # record's close its row holds is 0.5: ``_close_row``)
    seq: float
    observed_at: str
    source_priority: int
    source_rank: int
    specificity: float = 1.0

    def to_json(self) -> list[Any]:
        return [
            self.id,
            self.seq,
            self.observed_at,
            self.source_priority,
            self.source_rank,
            self.specificity,
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> ObservationMeta:
        return cls(data[0], data[1], data[2], data[3], data[4], data[5])


def _beats(new: list[Any], old: list[Any], policy: MergePolicy) -> bool:
    """True when ``new`` outranks ``old`` under ``policy`` (both in the ``to_json`` form:
    id, seq, observed_at, source_priority, source_rank, specificity).

    Winners are stored in that form, so comparing the lists directly spares building an
    ObservationMeta per field per fold.
    """
    strategy = policy.strategy
    if strategy == "last_write":
        return (new[2], new[1]) > (old[2], old[1])  # recency: observed_at, then seq
    if strategy == "most_specific" and new[5] != old[5]:
        return bool(new[5] > old[5])
    if new[3] != old[3]:
        return bool(new[3] > old[3])
    if new[4] != old[4]:
        return bool(new[4] < old[4])
    if policy.tie_breaker == "source_priority":
        # The server's "stable" tie-break: observation id ascending, not recency.
        return bool(new[0] < old[0])
    return (new[2], new[1]) > (old[2], old[1])


def _as_array(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return parsed if isinstance(parsed, list) else [value]
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _union_newest_first(newer: list[Any], older: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out: list[Any] = []
    for item in (*newer, *older):
        key = json.dumps(item, sort_keys=True, separators=(",", ":"))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


class SnapshotChange(NamedTuple):
    """What one folded observation did to an entity's snapshot, as the tables derived from
    snapshots (the search index, the conversation summaries) follow it: the fields and the
    deletion before and after."""

    entity_id: str
    entity_type: str
    old_fields: Mapping[str, Any]
    old_deleted: bool
    fields: Mapping[str, Any]
    deleted: bool
    last_observation_at: str | None


class SnapshotState:
    """An entity's snapshot plus the per-field winners needed to update it incrementally.

    ``winners``: field -> winning observation meta (merge_array: the max priority and its
    observation ids); ``top``: the observation that decides deletion (priority, source rank,
    recency); ``shared``: the seq of the observation stored without its fields, which are
    these (``_rows``).
    """

    __slots__ = (
        "deleted",
        "fields",
        "last_observation_at",
        "observation_count",
        "provenance",
        "shared",
        "top",
        "winners",
    )

    def __init__(
        self,
        fields: dict[str, Any] | None = None,
        provenance: dict[str, str] | None = None,
        winners: dict[str, Any] | None = None,
        top: ObservationMeta | None = None,
        deleted: bool = False,
        observation_count: int = 0,
        last_observation_at: str | None = None,
        shared: float | None = None,
    ) -> None:
        self.fields: dict[str, Any] = {} if fields is None else fields
        self.provenance: dict[str, str] = {} if provenance is None else provenance
        self.winners: dict[str, Any] = {} if winners is None else winners
        self.top = top
        self.deleted = deleted
        self.observation_count = observation_count
        self.last_observation_at = last_observation_at
        self.shared = shared

    def __repr__(self) -> str:
        return (
            f"SnapshotState(fields={self.fields!r}, deleted={self.deleted!r}, "
            f"observation_count={self.observation_count!r})"
        )

    def to_json(self) -> dict[str, Any]:
        """The persistent form: fields, provenance and what the next fold needs."""
        return {
            "f": self.fields,
            "p": self.provenance,
            "w": self.winners,
            "top": self.top.to_json() if self.top else None,
            "del": self.deleted,
        }

    @classmethod
    def from_json(
        cls, doc: dict[str, Any], observation_count: int, last_observation_at: str | None
    ) -> SnapshotState:
        top = doc.get("top")
        return cls(
            fields=doc.get("f", {}),
            provenance=doc.get("p", {}),
            winners=doc.get("w", {}),
            top=ObservationMeta.from_json(top) if top else None,
            deleted=bool(doc.get("del", False)),
            observation_count=observation_count,
            last_observation_at=last_observation_at,
        )


_DELETION_ORDER = MergePolicy("highest_priority")


def fold(
    state: SnapshotState,
    meta: ObservationMeta,
    fields: Mapping[str, Any],
    schema: TypeSchema | None,
) -> bool:
    """Fold one observation into ``state`` in place.

    Returns False only when ``state.fields`` is the same after as before, written as JSON
    (every value it set was already there, of the same type: a string, an int or a bool),
    so that the caller may skip what follows the fields (their indexes, their JSON again);
    True when they may have changed."""
    changed = False
    first = state.top is None and not state.winners and not state.fields and not state.provenance
    state.observation_count += 1
    if state.last_observation_at is None or meta.observed_at > state.last_observation_at:
        state.last_observation_at = meta.observed_at
    # One list for every field this observation wins: winners are never mutated in place.
    row = meta.to_json()
    if state.top is None or _beats(row, state.top.to_json(), _DELETION_ORDER):
        state.top = meta
        state.deleted = fields.get("_deleted") is True

    if first and sets_as_given(schema, fields):
        # The entity's first observation, each of its fields declared, not null and not
        # merged as an array: it wins every one as it is, with nothing to compare.
        state.fields.update(fields)
        state.winners.update(dict.fromkeys(fields, row))
        state.provenance.update(dict.fromkeys(fields, meta.id))
        return bool(fields)
    winners = state.winners
    for name, value in fields.items():
        if name == "_deleted" or (schema is not None and not schema.declares(name)):
            # An undeclared field stays on its observation only, as on a server.
            continue
        policy = schema.policy(name) if schema is not None else LAST_WRITE
        if policy.strategy == "merge_array":
            _fold_array(state, meta, name, value)
            changed = True
            continue
        current = winners.get(name)
        if current is not None and not _beats(row, current, policy):
            continue
        winners[name] = row
        state.provenance[name] = meta.id
        if value is None:
            # A winning null is an explicit clear.
            changed = state.fields.pop(name, _ABSENT) is not _ABSENT or changed
        elif changed or not _same(state.fields.get(name, _ABSENT), value):
            state.fields[name] = value
            changed = True
    return changed


def sets_as_given(schema: TypeSchema | None, fields: Mapping[str, Any]) -> bool:
    """Whether a first observation of ``fields`` sets each of them as it is (see ``fold``)."""
    declared, merged = _first_rules(schema)
    return (
        merged.isdisjoint(fields)
        and (declared is None or declared.issuperset(fields))
        and None not in fields.values()
    )


@functools.lru_cache(maxsize=256)  # a schema is one object per type, for the process
def _first_rules(schema: TypeSchema | None) -> tuple[frozenset[str] | None, frozenset[str]]:
    """The fields ``schema`` keeps (None: any) and those a fold does not set as they are
    (``_deleted``, and the fields merged as arrays)."""
    if schema is None:
        return None, frozenset(("_deleted",))
    merged = {n for n, p in schema.merge_policies.items() if p.strategy == "merge_array"}
    return schema.fields, frozenset((*merged, "_deleted"))


#: a field's value when the snapshot has no such field
_ABSENT: Any = object()
#: the types whose equal values are written as the same JSON (a float's is not: -0.0, 0.0)
_EXACT = frozenset((str, int, bool))


def _same(old: Any, new: Any) -> bool:
    """Whether a snapshot's ``old`` value is ``new`` written as the same JSON."""
    return type(old) is type(new) and type(new) in _EXACT and old == new


def _fold_array(state: SnapshotState, meta: ObservationMeta, name: str, value: Any) -> None:
    current = state.winners.get(name)
    items = _as_array(value)
    if current is None or meta.source_priority > current["p"]:
        # Only the highest priority present counts: a correction replaces the union.
        state.winners[name] = {"p": meta.source_priority, "ids": [meta.id]}
        merged = _union_newest_first(items, [])
    elif meta.source_priority == current["p"]:
        current["ids"].insert(0, meta.id)
        merged = _union_newest_first(items, _as_array(state.fields.get(name)))
    else:
        return
    state.provenance[name] = ",".join(state.winners[name]["ids"])
    state.fields[name] = merged


def renumber(state: SnapshotState, seq: float, to: int) -> None:
    """Observation ``seq`` of ``state`` named by seq ``to`` (where its row moved: into its
    entity row, out of it, or derived)."""
    if state.shared == seq:
        state.shared = to
    if state.top is not None and state.top.seq == seq:
        state.top = state.top._replace(seq=to)
    for name, winner in list(state.winners.items()):
        if isinstance(winner, list) and winner[1] == seq:
            state.winners[name] = [winner[0], to, *winner[2:]]
