"""A turn's prompt comes before its reply even when both are stored in one millisecond.

Every store of the embedded store is stamped here with one fixed time (the clock the
writes read), so every message has the same activity time: the conversation's reads must
still give each turn's prompt, then its reply, turn after turn. A tie broken by message id
(a hash) put a reply before its prompt.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import anyio
import pytest
from cli_support import show_json
from server_support import TOKEN

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent._records.keys import conversation_entity_id
from neotoma_agent.server import create_app, serving
from neotoma_agent.transport.embedded import _edges, _write

FIXED = "2026-12-01T10:00:00.000Z"
TURNS = 6
EXPECTED = [text for n in range(TURNS) for text in (f"question {n}", f"answer {n}")]


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_write, "now_iso", lambda: FIXED)
    monkeypatch.setattr(_edges, "now_iso", lambda: FIXED)


async def _record_and_read(db: Path) -> tuple[list[str], list[str], list[str]]:
    async with EmbeddedStore.open(db) as store:
        memory = NeotomaMemory(store, conversation_id="tie")
        for n in range(TURNS):
            async with memory.turn(f"question {n}") as t:
                t.reply = f"answer {n}"
        history = [text for turn in await memory.history(None) for text in (turn.user, turn.reply)]
        entity = conversation_entity_id("tie")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            serving(create_app(store, token=TOKEN)) as url,
            aiohttp.ClientSession(headers=auth) as session,
        ):
            async with session.get(f"{url}/recent_conversations/{entity}") as answer:
                one = [m["content"] for m in (await answer.json())["messages"]]
            async with session.get(f"{url}/recent_conversations") as answer:
                [item] = (await answer.json())["items"]
                listed = [m["content"] for m in item["messages"]]
    assert all(isinstance(t, str) for t in history)
    return history, one, listed  # type: ignore[return-value]


@pytest.mark.usefixtures("fixed_clock")
def test_messages_of_one_millisecond_come_by_turn_and_prompt_first(tmp_path: Path) -> None:
    db = tmp_path / "tie.db"
    history, one, listed = anyio.run(_record_and_read, db, backend="asyncio")
    assert one == EXPECTED  # the dev server's GET /recent_conversations/{id}
    assert listed == EXPECTED  # and the listing's messages
    assert history == EXPECTED  # memory.history (t.history reads the same)
    shown = show_json(db, "tie", tmp_path)
    assert [m["content"] for t in shown["turns"] for m in t["messages"]] == EXPECTED
