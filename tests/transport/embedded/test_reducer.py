"""Incremental snapshot reduction equals a full recomputation (semantics §1.4).

``fold`` updates a snapshot one observation at a time, remembering only each field's winner.
A server instead sorts every observation of the entity and reduces them all after each write.
The reference reducer below does the latter, and a seeded random walk checks that folding
the observations one by one (through a JSON round trip of the state, as the store keeps it)
always gives what the full recomputation gives, under each merge policy.

One deliberate difference is built into the reference: "newest" means latest ``observed_at``,
then latest insertion (``seq``), where the server breaks same-millisecond ties by
observation id.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from neotoma_agent._neotoma.identity import MergePolicy, TypeSchema
from neotoma_agent.transport.embedded._reducer import (
    ObservationMeta,
    SnapshotState,
    fold,
    source_rank,
)

SOURCES = ("sensor", "workflow_state", "llm_summary", "human", "import", "sync", None)
PRIORITIES = (50, 100, 100, 100, 200, 1000)


@attrs.frozen
class Obs:
    meta: ObservationMeta
    fields: Mapping[str, Any]


# -- the reference: sort everything, take the best ---------------------------------------------


def _newest_first(observations: Sequence[Obs]) -> list[Obs]:
    return sorted(observations, key=lambda o: (o.meta.observed_at, o.meta.seq), reverse=True)


def _ranked(observations: Sequence[Obs], policy: MergePolicy) -> list[Obs]:
    """Best first under ``policy`` (stable sorts, least significant key first)."""
    if policy.strategy == "last_write":
        return _newest_first(observations)
    if policy.tie_breaker == "source_priority":
        ordered = sorted(observations, key=lambda o: o.meta.id)
    else:
        ordered = _newest_first(observations)
    ordered.sort(key=lambda o: o.meta.source_rank)
    ordered.sort(key=lambda o: o.meta.source_priority, reverse=True)
    if policy.strategy == "most_specific":
        ordered.sort(key=lambda o: o.meta.specificity, reverse=True)
    return ordered


def _array(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return parsed if isinstance(parsed, list) else [value]
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def reference(observations: Sequence[Obs], schema: TypeSchema | None) -> dict[str, Any]:
    """The snapshot a full recomputation over ``observations`` gives."""
    top = _ranked(observations, MergePolicy("highest_priority"))[0]
    fields: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    names = {name for o in observations for name in o.fields if name != "_deleted"}
    for name in names:
        policy = schema.policy(name) if schema else MergePolicy("last_write")
        carrying = [o for o in observations if name in o.fields]
        if policy.strategy == "merge_array":
            best = max(o.meta.source_priority for o in carrying)
            winners = _newest_first([o for o in carrying if o.meta.source_priority == best])
            union: list[Any] = []
            seen: set[str] = set()
            for o in winners:
                for item in _array(o.fields[name]):
                    key = json.dumps(item, sort_keys=True)
                    if key not in seen:
                        seen.add(key)
                        union.append(item)
            fields[name] = union
            provenance[name] = ",".join(o.meta.id for o in winners)
            continue
        winner = _ranked(carrying, policy)[0]
        provenance[name] = winner.meta.id
        if winner.fields[name] is not None:
            fields[name] = winner.fields[name]
    return {
        "fields": fields,
        "provenance": provenance,
        "deleted": top.fields.get("_deleted") is True,
        "observation_count": len(observations),
        "last_observation_at": max(o.meta.observed_at for o in observations),
    }


def folded(state: SnapshotState) -> dict[str, Any]:
    return {
        "fields": state.fields,
        "provenance": state.provenance,
        "deleted": state.deleted,
        "observation_count": state.observation_count,
        "last_observation_at": state.last_observation_at,
    }


def round_trip(state: SnapshotState) -> SnapshotState:
    """Through JSON, as the store keeps it between writes."""
    return SnapshotState.from_json(
        json.loads(json.dumps(state.to_json())),
        state.observation_count,
        state.last_observation_at,
    )


# -- random observations ----------------------------------------------------------------------

SCALARS: tuple[Any, ...] = ("a", "b", "c", 1, 2, None, {"k": 1}, ["x"])
ARRAYS: tuple[Any, ...] = (
    ["a"],
    ["b", "a"],
    [1, 2],
    [],
    '["c", "a"]',
    "plain",
    7,
    [{"k": 1}],
)


def observations(
    rng: random.Random, names: Sequence[str], array_fields: frozenset[str], n: int
) -> list[Obs]:
    out = []
    clock = 1_000
    for seq in range(1, n + 1):
        clock += rng.choice((0, 0, 1, 5))  # many observations share a millisecond
        fields: dict[str, Any] = {}
        for name in rng.sample(list(names), rng.randint(1, len(names))):
            fields[name] = rng.choice(ARRAYS if name in array_fields else SCALARS)
        if rng.random() < 0.15:
            fields["_deleted"] = rng.random() < 0.8
        meta = ObservationMeta(
            id=f"{rng.getrandbits(32):08x}-{seq:04d}",  # id order unrelated to time
            seq=seq,
            observed_at=f"2026-01-01T00:00:{clock:07.3f}Z",
            source_priority=rng.choice(PRIORITIES),
            source_rank=source_rank(rng.choice(SOURCES)),
            specificity=rng.choice((0.5, 1.0, 1.0)),
        )
        out.append(Obs(meta, fields))
    return out


def schema_with(**policies: MergePolicy) -> TypeSchema:
    return TypeSchema("reducer_test", (), "merge", policies)


POLICIES = {
    "last_write": MergePolicy("last_write"),
    "highest_priority": MergePolicy("highest_priority"),
    "highest_priority_id_tie_breaker": MergePolicy("highest_priority", "source_priority"),
    "most_specific": MergePolicy("most_specific"),
    "merge_array": MergePolicy("merge_array"),
}


def check_fold_equals_reference(schema: TypeSchema | None, seeds: range, n: int = 40) -> None:
    names = ("f1", "f2", "f3")
    array_fields = frozenset(
        name for name in names if schema and schema.policy(name).strategy == "merge_array"
    )
    for seed in seeds:
        rng = random.Random(seed)
        history = observations(rng, names, array_fields, n)
        state = SnapshotState()
        for i, obs in enumerate(history):
            fold(state, obs.meta, obs.fields, schema)
            assert folded(state) == reference(history[: i + 1], schema), (seed, i)
            state = round_trip(state)


@pytest.mark.parametrize("policy", list(POLICIES), ids=list(POLICIES))
def test_folding_one_by_one_equals_full_recomputation(policy: str) -> None:
    check_fold_equals_reference(schema_with(f1=POLICIES[policy], f2=POLICIES[policy]), range(150))


def test_folding_equals_full_recomputation_with_mixed_policies() -> None:
    schema = schema_with(
        f1=POLICIES["highest_priority_id_tie_breaker"], f2=POLICIES["merge_array"]
    )  # f3: last_write by default
    check_fold_equals_reference(schema, range(150))


def test_folding_equals_full_recomputation_without_a_schema() -> None:
    check_fold_equals_reference(None, range(100))


# -- single rules -----------------------------------------------------------------------------


def meta(seq: int, *, priority: int = 100, at: str = "", oid: str = "") -> ObservationMeta:
    return ObservationMeta(
        id=oid or f"id-{seq:03d}",
        seq=seq,
        observed_at=at or f"2026-01-01T00:{seq // 60:02d}:{seq % 60:02d}.000Z",
        source_priority=priority,
        source_rank=source_rank("llm_summary"),
    )


def test_same_millisecond_last_write_goes_to_the_later_insertion() -> None:
    # Deliberate difference: the server would pick the smaller observation id.
    state = SnapshotState()
    at = "2026-01-01T00:00:00.000Z"
    fold(state, meta(1, at=at, oid="aaa"), {"x": "first"}, None)
    fold(state, meta(2, at=at, oid="000"), {"x": "second"}, None)
    assert state.fields == {"x": "second"}


def test_observation_source_rank_follows_the_default_trust_order() -> None:
    ranks = [source_rank(s) for s in SOURCES]
    assert ranks == sorted(ranks)
    assert source_rank("unheard_of") == source_rank(None)


def test_state_keeps_one_winner_per_field_not_the_history() -> None:
    schema = schema_with(x=MergePolicy("highest_priority"))
    state = SnapshotState()
    for seq in range(1, 501):
        fold(state, meta(seq), {"x": seq, "y": seq}, schema)
    encoded = json.dumps(state.to_json())
    assert state.observation_count == 500
    assert state.fields == {"x": 500, "y": 500}
    assert len(encoded) < 400


#: values equal in Python but written apart as JSON (and one float sign JSON keeps)
EQUAL_UNLIKE: tuple[Any, ...] = (1, True, 1.0, 0, False, 0.0, -0.0, "1", None)


def _as_written(fields: dict[str, Any], *, ordered: bool = True) -> str:
    """``fields``' JSON (in their order, or by name), each value's type beside it (so that
    ``0.0`` and ``0``, and a float's sign, tell apart)."""
    items = list(fields.items()) if ordered else sorted(fields.items())
    return json.dumps([(k, v, type(v).__name__, repr(v)) for k, v in items])


@pytest.mark.parametrize("schema", [None, schema_with(f1=POLICIES["highest_priority"])])
def test_fold_keeps_each_winning_value_as_it_was_written(schema: TypeSchema | None) -> None:
    # The first fold of a new state sets its fields with nothing to compare, and a fold
    # says "unchanged" only when the fields' JSON is the same: both must hold for values
    # Python calls equal (1 and True, 0.0 and -0.0).
    for seed in range(80):
        rng = random.Random(seed)
        state = SnapshotState()
        history: list[Obs] = []
        for seq in range(1, 25):
            names = rng.sample(["f1", "f2"], rng.randint(1, 2))
            fields = {name: rng.choice(EQUAL_UNLIKE) for name in names}
            obs = Obs(meta(seq, priority=rng.choice(PRIORITIES)), fields)
            history.append(obs)
            before = _as_written(state.fields)
            changed = fold(state, obs.meta, obs.fields, schema)
            expected = reference(history, schema)
            got, want = state.fields, expected["fields"]
            assert _as_written(got, ordered=False) == _as_written(want, ordered=False), (seed, seq)
            assert state.provenance == expected["provenance"], (seed, seq)
            if not changed:
                assert _as_written(state.fields) == before, (seed, seq)
            state = round_trip(state)
