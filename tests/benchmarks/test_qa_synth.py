"""The benchmarks' fast builder (``benchmarks/_synth.py``) writes what real turns write.

A small store is written twice from the same inputs: once by ``NeotomaMemory`` turns, once
by the builder; ``audit``, ``stats`` and ``show`` (their JSON, ids and timestamps
normalised) and identifier lookups must answer alike on both.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from paths_support import ROOT

from neotoma_agent._memory import NeotomaMemory
from neotoma_agent.cli._show import load_transcript
from neotoma_agent.qa import audit
from neotoma_agent.reads import collect_stats
from neotoma_agent.transport.embedded import EmbeddedStore

sys.path.insert(0, str(ROOT / "benchmarks"))
import _synth

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

CONVERSATIONS, TURNS = 3, 4
ORPHANS = frozenset({2, 9})  # turn 2 of conversation 0, turn 1 of conversation 2

_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def normalised(value: Any) -> Any:
    """JSON with timestamps and durations blanked (the two stores were written apart)."""
    if isinstance(value, dict):
        return {
            k: None if k in ("duration_ms",) else normalised(v) for k, v in sorted(value.items())
        }
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str):
        return _STAMP.sub("<time>", value)
    return value


async def real_turns(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        for c in range(CONVERSATIONS):
            memory = NeotomaMemory(
                store,
                conversation_id=_synth.conversation_id(c),
                platform="benchmark",
                conversation_title=f"Benchmark {c}",
            )
            for t in range(TURNS):
                ids = {"turn_id": _synth.turn_id(t), "turn_number": t}
                if c * TURNS + t in ORPHANS:
                    await memory.open_turn(_synth.question(c, t), **ids)
                    continue
                async with memory.turn(_synth.question(c, t), **ids) as turn:
                    turn.reply = _synth.reply(c, t)


async def answers(path: Path) -> dict[str, Any]:
    async with EmbeddedStore.open(path) as store:
        lookups = {}
        for needle in (_synth.question(1, 2), _synth.reply(2, 3), _synth.conversation_id(1)):
            found = await store.retrieve_entity_by_identifier(needle)
            lookups[needle] = sorted((e.id, e.entity_type) for e in found.entities)
        return {
            "audit": (await audit(store, min_age=0)).to_json(),
            "stats": (await collect_stats(store)).to_json(),
            "show": [
                (await load_transcript(store, _synth.conversation_id(c))).to_json()
                for c in range(CONVERSATIONS)
            ],
            "lookups": lookups,
        }


async def test_the_builder_writes_what_real_turns_write(tmp_path: Path) -> None:
    await real_turns(tmp_path / "real.db")
    _synth.build_turns(tmp_path / "built.db", CONVERSATIONS, TURNS, ORPHANS)
    real, built = await answers(tmp_path / "real.db"), await answers(tmp_path / "built.db")
    assert real["stats"]["turns"] == CONVERSATIONS * TURNS
    assert len(real["audit"]["findings"]) == len(ORPHANS)
    assert normalised(built) == normalised(real)


async def test_the_builder_writes_companies_a_lookup_finds(tmp_path: Path) -> None:
    _synth.build_companies(tmp_path / "companies.db", 1_200)
    async with EmbeddedStore.open(tmp_path / "companies.db") as store:
        stats = await collect_stats(store)
        found = await store.retrieve_entity_by_identifier(_synth.company_name(1_099))
    assert stats.by_type["company"] == 1_200
    assert [e.canonical_name for e in found.entities] == [_synth.company_name(1_099)]
