"""``neotoma-agent demo``: a scripted conversation that shows the turn protocol at work.

Six turns on an embedded store: the first stores two entities (a company and a person), later
turns name them so retrieval finds them and REFERS_TO edges appear, one turn streams its reply
chunk by chunk, one fails mid-stream and is recorded as abandoned with its partial reply, and
a one-word turn is stored like any other. After each turn the demo prints what was retrieved
and stored; at the end it reads the conversation graph back from the store.

The "agent" is a script (no LLM is called): the point is what the protocol stores. Turn ids
are fixed, so running the demo again on the same ``--db`` replays every turn instead of
storing it twice.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TextIO

import anyio
import anyio.lowlevel
import attrs

from .. import EmbeddedStore, Entity, NeotomaMemory, Transport, Turn, TurnResult
from ..exceptions import IdempotencyMismatchError
from ..reads import read_ending

__all__ = ["run_demo"]

CONVERSATION_ID = "demo"


class DemoModelError(RuntimeError):
    """The scripted model's connection drops in the middle of turn 4."""


@attrs.frozen
class _Script:
    turn_id: str
    user: str
    agent: Callable[[Turn, TextIO, Transport], Awaitable[None]]
    streams: bool = False


def _names(entities: tuple[Entity, ...]) -> str:
    return ", ".join(e.name for e in entities) or "nothing yet"


async def _typewriter(text: str, *, fail_after: int | None = None) -> AsyncIterator[str]:
    # Word by word, like a model's token stream.
    words = text.split(" ")
    for i, word in enumerate(words):
        if fail_after is not None and i == fail_after:
            raise DemoModelError("the model connection dropped")
        await anyio.sleep(0.01)
        yield word if i == len(words) - 1 else word + " "


async def _introduce(t: Turn, out: TextIO, store: Transport) -> None:
    # The agent records what it learned as entities, then cites them from its reply.
    facts = await store.store(
        [
            {"entity_type": "company", "name": "Acme Corp", "website": "acme.com"},
            {
                "entity_type": "person",
                "name": "Ana Lopez",
                "email": "ana.lopez@acme.com",
                "role": "Head of Procurement",
            },
        ],
        relationships=[{"relationship_type": "works_at", "source_index": 1, "target_index": 0}],
        idempotency_key="demo-facts-acme",
    )
    t.cite(facts.entity_id(0), facts.entity_id(1))
    t.reply = (
        "Congratulations! I've noted Acme Corp (acme.com) as a new client and "
        "Ana Lopez as their Head of Procurement."
    )


async def _recall(t: Turn, out: TextIO, store: Transport) -> None:
    company = next((e for e in t.linked if e.entity_type == "company"), None)
    if company is None:
        t.reply = "I don't have anything on Acme Corp yet."
        return
    website = company.snapshot.get("website", "unknown")
    t.reply = f"{company.name} is a client (website: {website}). Ana Lopez runs their procurement."


async def _stream_welcome(t: Turn, out: TextIO, store: Transport) -> None:
    person = next((e for e in t.linked if e.entity_type == "person"), None)
    email = person.snapshot.get("email", "her work address") if person else "her work address"
    text = (
        f"Here is a draft for {email}: Dear Ana, welcome aboard! We are delighted to start "
        "working with Acme Corp and look forward to our first order."
    )
    async for chunk in t.stream(_typewriter(text)):
        out.write(chunk)
        out.flush()
    out.write("\n")


async def _fail_mid_stream(t: Turn, out: TextIO, store: Transport) -> None:
    text = "The Lisbon offsite for Acme Corp: day one covers the roadmap, day two the contract"
    async for chunk in t.stream(_typewriter(text, fail_after=7)):
        out.write(chunk)
        out.flush()


async def _who_to_contact(t: Turn, out: TextIO, store: Transport) -> None:
    names = [e.name for e in t.linked if e.entity_type == "person"]
    if not names:
        # Not named in the question: follow the company's works_at edges instead.
        for company in (e for e in t.linked if e.entity_type == "company"):
            related = await store.retrieve_related_entities(
                company.id, relationship_types=["works_at"], direction="inbound"
            )
            for person in (e for e in related.entities if e.entity_type == "person"):
                # Related-entity rows carry no snapshot: read the name from the entity.
                snapshot = (await store.get_entity_snapshot(person.id)).snapshot
                names.append(str(snapshot.get("name") or person.name))
                t.cite(person.id)
    t.reply = f"For the invoice, contact {' or '.join(names) or 'nobody I know of'}."


async def _thanks(t: Turn, out: TextIO, store: Transport) -> None:
    t.reply = "You're welcome!"


SCRIPT = (
    _Script(
        "t1",
        "Great news: we just signed Acme Corp! Ana Lopez (ana.lopez@acme.com) heads "
        "their procurement.",
        _introduce,
    ),
    _Script("t2", "What do we know about Acme Corp?", _recall),
    _Script("t3", "Please draft a short welcome note to Ana Lopez.", _stream_welcome, True),
    _Script("t4", "Summarize the Lisbon offsite plan for Acme Corp.", _fail_mid_stream, True),
    _Script("t5", "Who at Acme Corp should I contact about the invoice?", _who_to_contact),
    _Script("t6", "Thanks!", _thanks),
)


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


async def _print_turn(
    out: TextIO, store: Transport, number: int, script: _Script, t: Turn, error: str | None
) -> None:
    r: TurnResult = t.result
    if not script.streams:
        out.write(f"  assistant: {t.reply}\n")
    if error is not None:
        out.write(f"  !! the agent failed: {error}\n")
    status = r.stored_status or "NOT STORED"
    if r.error_class is not None:
        status += f" ({r.error_class.rsplit('.', 1)[-1]})"
    out.write(f"  stored:    user message {r.user_message_id}")
    if r.assistant_message_id:
        kind = "partial reply" if r.error_class else "assistant message"
        out.write(f", {kind} {r.assistant_message_id}")
    out.write(f"; turn record {status}")
    if r.replayed:
        out.write(" (replayed: this turn was already stored)")
    out.write("\n")
    # What the store holds, not what this run asked for: a replayed turn keeps the edges its
    # first run wrote.
    edges = 0
    for message_id in (r.user_message_id, r.assistant_message_id):
        if message_id:
            related = await store.retrieve_related_entities(
                message_id, relationship_types=["REFERS_TO"], direction="outbound"
            )
            edges += sum(1 for e in related.relationships if e.source_entity_id == message_id)
    out.write(f"             {edges} REFERS_TO edge(s), {r.retrieval.lookups} lookup(s), ")
    out.write(f"{r.open_ms:.1f} ms to open, {r.close_ms:.1f} ms to close\n")


async def _print_graph(out: TextIO, store: Transport, conversation_entity_id: str) -> None:
    out.write("\nThe conversation graph, read back from the store\n")
    out.write("=" * 49 + "\n")
    conversation = await store.get_entity_snapshot(conversation_entity_id)
    parts = await store.retrieve_related_entities(
        conversation_entity_id, relationship_types=["PART_OF"], direction="inbound"
    )
    message_ids = [r.source_entity_id for r in parts.relationships]
    out.write(
        f"conversation {conversation.snapshot.get('conversation_id')!r} "
        f"({conversation_entity_id}): {len(message_ids)} messages PART_OF it\n"
    )
    rows = []
    referred: dict[str, int] = {}
    for message_id in message_ids:
        snap = (await store.get_entity_snapshot(message_id)).snapshot
        related = await store.retrieve_related_entities(
            message_id, relationship_types=["REFERS_TO"], direction="outbound"
        )
        names = {e.id: e.canonical_name or e.id for e in related.entities}
        targets = []
        for edge in related.relationships:
            if edge.source_entity_id == message_id:
                target = (await store.get_entity_snapshot(edge.target_entity_id)).snapshot
                targets.append(str(target.get("name") or names.get(edge.target_entity_id)))
                referred[targets[-1]] = referred.get(targets[-1], 0) + 1
        rows.append((str(snap.get("turn_key", "")), str(snap.get("role")), snap, targets))
    for turn_key, role, snap, targets in sorted(rows, key=lambda row: row[0]):
        turn = turn_key.split(":")[1] if ":" in turn_key else "?"
        refers = ", ".join(sorted(targets)) or "-"
        content = _short(str(snap.get("content", "")), 48)
        out.write(f"  {turn:<3} {role:<9} {content!r:<52} REFERS_TO {refers}\n")

    records = await store.query_entities(entity_type="conversation_turn", limit=500)
    statuses = []
    for record in records.entities:
        if record.snapshot.get("session_id") != CONVERSATION_ID:
            continue
        ending = await read_ending(store, record)
        status = ending.status
        if ending.error_class is not None:
            status += f" ({ending.error_class.rsplit('.', 1)[-1]})"
        statuses.append(f"{record.snapshot.get('turn_id')} {status}")
    out.write("turn records: " + ", ".join(sorted(statuses)) + "\n")
    if referred:
        most = ", ".join(f"{name} <- {n} messages" for name, n in sorted(referred.items()))
        out.write(f"entities referred to: {most}\n")


async def run_demo(db_path: str | None, *, out: TextIO | None = None) -> None:
    """Run the scripted conversation on an embedded store and print what it stores.

    ``db_path`` is the SQLite file to use (kept afterwards); ``None`` uses a temporary file
    that is deleted at the end. ``out`` defaults to ``sys.stdout`` as it is when called.
    """
    with tempfile.TemporaryDirectory(prefix="neotoma-demo-") as tmp:
        path = db_path if db_path is not None else str(Path(tmp) / "demo.db")
        where = path if db_path is not None else "a temporary store (pass --db PATH to keep it)"
        async with EmbeddedStore.open(path) as store:
            await run_demo_on(store, where, out=out)


async def run_demo_on(store: Transport, where: str, *, out: TextIO | None = None) -> None:
    """Run the scripted conversation over any transport (a server: ``demo --url``).

    ``out`` defaults to ``sys.stdout`` as it is when called (a default bound at import
    would ignore a redirected stdout).
    """
    out = out if out is not None else sys.stdout
    out.write(f"neotoma-agent demo: conversation {CONVERSATION_ID!r} in {where}\n")
    memory = NeotomaMemory(
        store,
        conversation_id=CONVERSATION_ID,
        platform="neotoma-agent-demo",
        conversation_title="Onboarding Acme Corp",
    )
    conversation_entity_id = ""
    for number, script in enumerate(SCRIPT, start=1):
        out.write(f"\n-- turn {number} ({script.turn_id}) " + "-" * 40 + "\n")
        out.write(f"  user:      {script.user}\n")
        t = memory.turn(script.user, turn_id=script.turn_id, turn_number=number)
        error: str | None = None
        try:
            async with t:
                out.write(f"  retrieved: {_names(t.linked)}\n")
                if script.streams:
                    out.write("  assistant: ")
                await script.agent(t, out, store)
        except DemoModelError as exc:
            out.write("\n")
            error = f"{type(exc).__name__}: {exc}"
        except IdempotencyMismatchError as exc:
            # A store written by another version of this script: the protocol refuses
            # to overwrite a stored turn with a different text, and so do we.
            out.write(f"  !! not stored: {exc.message}\n     hint: {exc.hint}\n")
            continue
        await _print_turn(out, store, number, script, t, error)
        conversation_entity_id = t.result.conversation_entity_id or conversation_entity_id
        await anyio.lowlevel.checkpoint()
    await _print_graph(out, store, conversation_entity_id)
