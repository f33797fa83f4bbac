"""A store answer's entries, built only when read: exactly what parsing them eagerly gives.

``StoreResult.from_json`` leaves ``entities`` to its first read and answers
:meth:`StoreResult.entity_id` off the answer's own entries (a closing store answers one
entry per tool call; a turn reads a few ids). These tests hold that against the eager
parse (every entry a ``StoredEntity``, aligned, then searched), on recorded answers of a
real server and on the shapes a store may send.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from paths_support import TESTS

from neotoma_agent.transport._base import StoredEntity, StoreResult
from neotoma_agent.transport._results import _align

SAMPLES = TESTS / "data" / "samples"


def _eager(raw: Mapping[str, Any], request: Sequence[Mapping[str, Any]] | None) -> list[Any]:
    """``entities`` and ``entity_id(i)`` for every index, as the eager parse gave them."""
    entries = [StoredEntity.from_json(e) for e in raw.get("entities") or [] if isinstance(e, dict)]
    if request is not None:
        entries = _align(entries, request)
    ids: list[Any] = []
    for index in range(len(request or ()) + 3):
        ids.append(next((e.entity_id for e in entries if e.observation_index == index), None))
    return [tuple(entries), ids]


def _lazy_ids(result: StoreResult, count: int) -> list[str | None]:
    ids: list[str | None] = []
    for index in range(count + 3):
        try:
            ids.append(result.entity_id(index))
        except IndexError:
            ids.append(None)
    return ids


def _pending(result: StoreResult) -> dict[str, Any]:
    try:
        pending: dict[str, Any] = object.__getattribute__(result, "_pending")
    except AttributeError:
        return {}
    return pending


def _recorded() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    pairs = []
    for path in sorted(Path(SAMPLES).rglob("*store*.request.json")):
        request = json.loads(path.read_text())
        response = json.loads(path.with_name(path.name.replace("request", "response")).read_text())
        if isinstance(response.get("body"), dict) and "entities" in response["body"]:
            pairs.append((request["body"], response["body"]))
    return pairs


def _shapes() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    def entry(eid: Any, index: Any, etype: str = "t") -> dict[str, Any]:
        return {"entity_id": eid, "entity_type": etype, "observation_index": index}

    request = {"entities": [{"entity_type": "t", "target_id": f"e{i}"} for i in range(3)]}
    answers = [
        [entry("e2", 2), entry("e0", 0), entry("e1", 1)],  # out of order
        [entry("e0", 0), entry("dup", 0), entry("e1", 1)],  # an index twice: the first
        [entry(7, 0), entry("e1", 1)],  # an id that is not a string
        [entry("e0", 0), entry("e1", None)],  # no index: aligned by identity
        [entry("e1", None), entry("e0", None), "not an entry"],  # a replay
        [entry("e0", True), entry("e1", 1)],  # a bool is no index
        [],
    ]
    return [(request, {"replayed": False, "entities": a}) for a in answers]


CASES = _recorded() + _shapes()


def test_recorded_answers_are_found() -> None:
    assert len(_recorded()) >= 3


@pytest.mark.parametrize(("request_body", "raw"), CASES)
@pytest.mark.parametrize("aligned", [True, False])
def test_lazy_entries_equal_eager_ones(
    request_body: dict[str, Any], raw: dict[str, Any], aligned: bool
) -> None:
    request = request_body["entities"] if aligned else None
    entities, ids = _eager(raw, request)
    count = len(request or ())
    first = StoreResult.from_json(raw, request_entities=request)
    assert "entities" in _pending(first)  # nothing built yet
    assert _lazy_ids(first, count) == ids  # ids read before the entries
    assert first.entities == entities
    assert _lazy_ids(first, count) == ids

    second = StoreResult.from_json(raw, request_entities=request)
    assert second.entities == entities  # the entries first
    assert _lazy_ids(second, count) == ids
    assert second == first
    # Copies carry the entries (not the id cache), and answer the same.
    for other in (
        pickle.loads(pickle.dumps(StoreResult.from_json(raw, request_entities=request))),
        copy.deepcopy(StoreResult.from_json(raw, request_entities=request)),
        attrs.evolve(StoreResult.from_json(raw, request_entities=request)),
    ):
        assert other == first
        assert _lazy_ids(other, count) == ids
