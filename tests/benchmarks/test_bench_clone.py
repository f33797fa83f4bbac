"""The benchmarks' cloning builder (``benchmarks/_clone.py``) writes what the store writes.

A store whose conversations 1..N-1 were copied from conversation 0 row by row must answer
every read a page makes exactly as one where each turn went through the store's action
(with the same texts: a copy keeps its template's): ``show``'s transcript, the
per-conversation summary, the snapshots, observations and relationships of every entity,
the lookups by name; times aside (a copy's are shifted on purpose), and the
observation and source ids (a copy keeps its template's: see ``_clone``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from paths_support import ROOT

from neotoma_agent._records.keys import conversation_entity_id
from neotoma_agent.cli._show import load_transcript
from neotoma_agent.transport.embedded import EmbeddedStore

sys.path.insert(0, str(ROOT / "benchmarks"))
import _clone
import _synth

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

_TIMES = frozenset(
    (
        "activity_at",
        "last_activity",
        "last_observation_at",
        "observed_at",
        "created_at",
        "updated_at",
        "computed_at",
        # the winning observations' ids: a copy keeps its template's (see _clone)
        "provenance",
    )
)


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


async def _entity(store: EmbeddedStore, entity_id: str) -> Any:
    snapshot = await store.request("get_entity_snapshot", {"entity_id": entity_id})
    observations = await store.request("list_observations", {"entity_id": entity_id})
    for o in observations["observations"]:
        # A copy keeps its template's observation and source ids (hashes: see _clone).
        o.pop("source_id", None)
        o.pop("id", None)
    related = await store.request(
        "retrieve_related_entities", {"entity_id": entity_id, "direction": "both"}
    )
    return _timeless([snapshot, observations, related])


async def _answers(path: Path, conversations: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with EmbeddedStore.open(path) as store:
        page = await store.conversation_summaries(limit=100)
        out["summaries"] = sorted(
            (_timeless(dict(i)) for i in page.raw["items"]), key=lambda i: i["conversation_id"]
        )
        for n in range(conversations):
            cid = _synth.conversation_id(n)
            shown = out[cid] = (await load_transcript(store, cid)).to_json()
            ids = [conversation_entity_id(cid)]
            for turn in shown["turns"]:
                ids += [turn["turn_record_id"], *(m["entity_id"] for m in turn["messages"])]
            for entity_id in ids:
                out[entity_id] = await _entity(store, entity_id)
            found = await store.request("retrieve_entity_by_identifier", {"identifier": cid})
            out[f"lookup:{cid}"] = _timeless(found)
    return out


async def test_a_cloned_store_answers_as_one_written_turn_by_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact, cloned = tmp_path / "exact.db", tmp_path / "cloned.db"
    _clone.build_cloned(cloned, 3, 3)
    # A copy keeps its template's texts (only ids change): the turn-by-turn store gets the
    # same texts in every conversation.
    question, reply, settings = _synth.question, _synth.reply, _synth.settings
    monkeypatch.setattr(_synth, "question", lambda _i, t: question(0, t))
    monkeypatch.setattr(_synth, "reply", lambda _i, t: reply(0, t))
    monkeypatch.setattr(_synth, "settings", lambda i: settings(i)._replace(title=settings(0).title))
    _synth.build_turns(exact, 3, 3)
    want, got = await _answers(exact, 3), await _answers(cloned, 3)
    assert list(got) == list(want)
    for key, answer in want.items():
        assert got[key] == answer, key
