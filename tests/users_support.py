"""Seeding a store with several users' memories, each marked with words of its own, and
reading everything one user can read through every read path a store has."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from neotoma_agent import EmbeddedStore, NeotomaMemory, NotFoundError, UserStore
from neotoma_agent._recall.history import read_conversation
from neotoma_agent.cli._backup import BackupStats, read_backup
from neotoma_agent.qa import audit

__all__ = ["MARKS", "everything_visible", "seed_user"]

Viewer = UserStore | EmbeddedStore

#: each user's own words: in its prompt, reply, tool arguments and result, remembered fields
MARKS = {
    "alice": "Xalicemark",
    "bob": "Ybobmark",
    "00000000-0000-0000-0000-000000000000": "Zlocalmark",
}


async def seed_user(view: Viewer, mark: str) -> dict[str, str]:
    """A completed turn with a tool call and a remembered entity, and an orphan turn (what
    the audit reports), all of the same conversation ids for every user; the ids made."""
    memory = NeotomaMemory(view, conversation_id="support")
    async with memory.turn(f"Prompt {mark}one: do you know Maria Gomez?", turn_id="t1") as t:
        t.record_tool("lookup", args={"q": f"{mark}two"}, result={"hit": f"{mark}three"})
        maria = t.remember("person", name="Maria Gomez", notes=f"{mark}four treats her")
        t.reply = f"Reply {mark}five."
    await memory.remember("company", name="Acme Corp", notes=f"{mark}six")
    orphan = NeotomaMemory(view, conversation_id=f"open-{mark}eight")
    await orphan.open_turn(f"Orphan {mark}seven", turn_id="o1")
    return {"maria": maria, "turn": "t1"}


def _text(obj: Any) -> str:
    return json.dumps(obj, default=repr, sort_keys=True)


async def everything_visible(view: Viewer, ids: list[str]) -> str:
    """The text of every read ``view`` offers: the Transport's reads, the conversation
    reads, search, tool calls, show's and export's readers, the audit, the actions and GET
    routes the dev server forwards, and every point read of each id of ``ids`` (another
    user's included: each must be "not found" or empty)."""
    out: list[str] = []
    memory = NeotomaMemory(view, conversation_id="support")
    out.append(_text(await memory.retrieve("Maria Gomez Acme Corp")))
    out.append(_text(await memory.history(limit=None)))
    out.append(_text(await memory.tools("t1")))
    out.append(_text(await memory.search("mark")))
    for word in ("one", "two", "three", "four", "five", "six", "seven"):
        for mark in MARKS.values():
            out.append(_text(await view.search(f"{mark}{word}")))
    out.append(_text(await read_conversation(view, "support", tool_details=True)))
    out.append(_text(await view.recent_conversations()))
    out.append(_text(await view.conversation_summaries()))
    out.append(_text(await view.query_entities(limit=100)))
    out.append(_text(await view.retrieve_many([{"identifier": "Maria Gomez"}])))
    summaries = await view.conversation_summaries()
    cids = [i.conversation_id for i in summaries.items]
    out.extend(
        [line async for line in read_backup(view, cids, everything=True, stats=BackupStats())]
    )
    out.append(_text((await audit(view, min_age=0)).to_json()))
    for action, body in (
        ("entities/query", {"limit": 100}),
        ("text_search", {"q": "mark"}),
        ("retrieve_entity_by_identifier", {"identifier": "Gomez"}),
    ):
        out.append(_text(await view.request(action, body)))
    for path in ("/recent_conversations", "/conversation_summaries"):
        out.append(_text(await view.get_route(path, {})))
    out.append(_text(await view.request("get_relationships", {"limit": 100})))
    for entity_id in ids:
        for action in (
            "get_entity_snapshot",
            "get_entity",
            "get_entity_observations",
            "get_entity_relationships",
            "list_observations",
            "retrieve_related_entities",
        ):
            with contextlib.suppress(NotFoundError):
                out.append(_text(await view.request(action, {"entity_id": entity_id})))
        out.append(
            _text(await view.request("retrieve_entity_by_identifier", {"identifier": entity_id}))
        )
        with contextlib.suppress(NotFoundError):
            out.append(_text(await view.get_route(f"/recent_conversations/{entity_id}", {})))
    return "\n".join(out)
