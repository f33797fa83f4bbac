"""One shape for one idea: ``remember`` everywhere, one status to read, display names and
``show``'s numbering as a user expects them (issue 31 §1)."""

from __future__ import annotations

import asyncio
import gc
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from cli_support import clean_env
from structlog.testing import capture_logs
from turn_support import db_path, memory, messages, seed, store, targets

from neotoma_agent import Entity, TurnState
from neotoma_agent.cli._show import load_transcript, render_transcript
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio


# --- remember: one name, one answer (an id) ---------------------------------------------


async def test_opened_remember_returns_the_id_and_rides_on_the_close(store: Transport) -> None:
    [acme] = await seed(store, "Acme Corp")
    recorder = RecordingTransport(store)
    m = memory(recorder)
    opened = await m.open_turn("Book a table and note Acme Corp", turn_id="t1")
    booking = opened.remember("booking", name="Table for two", party=2)
    assert opened.remember("company", name="Acme Corp", type="prospect") == acme  # extended
    assert opened.remember("company", name="Acme Corp", type="customer") == acme  # later wins
    assert isinstance(booking, str)
    assert opened.produced_ids == (booking, acme)
    result = await m.close_turn(opened, f"Booked ({booking}).")  # by the OpenTurn
    assert len(recorder.calls_to("store")) == 2  # the user store and the closing store
    assert result.produced_ids == (booking, acme)
    assert (await store.get_entity_snapshot(acme)).snapshot["type"] == "customer"
    assistant = (await messages(store, result.conversation_entity_id))["chat-1:t1:assistant"]
    assert booking in await targets(store, assistant["id"], "REFERS_TO")


async def test_opened_remember_is_written_when_closed_by_id_or_abandoned(
    store: Transport,
) -> None:
    m = memory(store)
    opened = await m.open_turn("draft a plan", turn_id="t1")
    plan = opened.remember("plan", title="Offsite plan")
    older = opened.produce("note", title="Older form")  # the documented alias
    result = await m.abandon_turn("t1", error="Stopped", partial_reply="Day", produced=[older])
    assert result.status is TurnState.ABANDONED
    assert result.produced_ids == (plan, older.entity_id)
    assert (await store.get_entity_snapshot(plan)).entity_type == "plan"


async def test_memory_remember_awaited_is_the_same_id(store: Transport) -> None:
    m = memory(store)
    stored = await m.remember("company", name="Globex")
    opened = await m.open_turn("Globex?", turn_id="t1")
    assert opened.remember("company", name="Globex") == stored
    await m.close_turn(opened, "ok")


async def test_memory_remember_runs_as_a_task_on_every_backend(store: Transport) -> None:
    m = memory(store)
    found: list[str] = []

    async def keep(name: str) -> None:
        found.append(await m.remember("company", name=name))

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep, "Initech")
    assert found
    assert found[0].startswith("ent_")


async def test_memory_remember_goes_to_asyncio_create_task(
    store: Transport, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("asyncio.create_task is asyncio's")
    m = memory(store)
    task = asyncio.create_task(m.remember("company", name="Umbrella"))
    stored = await task
    assert stored.startswith("ent_")
    assert await asyncio.gather(m.remember("company", name="Umbrella")) == [stored]


async def test_a_missing_await_is_loud(store: Transport) -> None:
    m = memory(store)
    pending = m.remember("company", name="Hooli")
    with pytest.raises(TypeError, match=r"await memory\.remember"):
        f"cited {pending}"
    with pytest.raises(TypeError, match=r"await memory\.remember"):
        str(pending)
    with capture_logs() as logs:
        del pending
        gc.collect()
    (event,) = [e for e in logs if e["event"] == "remember.not_awaited"]
    assert event["log_level"] == "error"
    assert event["entity_type"] == "company"
    assert "Hooli" not in repr(event)
    # Bad input is refused at the call, awaited or not.
    with pytest.raises(ValueError, match="protocol's own"):
        m.remember("conversation_message", name="x")


def test_a_missing_await_reaches_stderr_with_no_logging_configured(tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import asyncio, sys
        from neotoma_agent import EmbeddedStore, NeotomaMemory

        async def main():
            async with EmbeddedStore.open(sys.argv[1]) as store:
                memory = NeotomaMemory(store, conversation_id="c")
                memory.remember("company", name="Hooli")  # the mistake: no await
                found = await store.retrieve_entity_by_identifier("Hooli")
                print(len(found.entities))

        asyncio.run(main())
        """
    )
    script = tmp_path / "program.py"
    script.write_text(program)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        timeout=60,
        check=True,
    )
    assert done.stdout == "0\n"  # nothing was stored...
    assert "remember.not_awaited" in done.stderr  # ...and the program was told
    assert "await memory.remember" in done.stderr
    assert "RuntimeWarning" not in done.stderr  # one clear line, not the vague warning


# --- TurnResult: read status ------------------------------------------------------------


async def test_status_is_the_one_answer_and_prints_as_its_word(store: Transport) -> None:
    async with memory(store).turn("hello", turn_id="t1") as t:
        t.reply = "hi"
    assert t.result.status is TurnState.COMPLETED
    assert t.result.status == "completed" == t.result.stored_status
    assert f"{t.result.status}" == str(t.result.status) == "completed"
    with pytest.warns(DeprecationWarning, match=r"TurnState\.CLOSED .* TurnState\.COMPLETED"):
        assert TurnState.CLOSED is TurnState.COMPLETED  # the old name still resolves


# --- display names ----------------------------------------------------------------------


def _entity(entity_type: str, canonical: str | None, **snapshot: object) -> Entity:
    return Entity(
        id="ent_0", entity_type=entity_type, canonical_name=canonical, snapshot=snapshot, raw={}
    )


def test_display_names_are_what_a_user_expects() -> None:
    assert _entity("company", "Globex").name == "Globex"
    assert _entity("person", "person:Hank Scorpio").name == "Hank Scorpio"
    assert _entity("person", "person:Hank|Scorpio").name == "Hank Scorpio"
    assert _entity("person", None, first_name="Hank", last_name="Scorpio").name == "Hank Scorpio"
    assert _entity("person", None, first_name="Hank", email="h@globex.com").name == "Hank"
    assert _entity("person", None, email="h@globex.com").name == "h@globex.com"
    assert _entity("note", "note:").name == "note:"  # nothing after the prefix: as stored
    assert _entity("note", None).name == "ent_0"


async def test_a_stored_person_shows_its_name(store: Transport) -> None:
    m = memory(store)
    await m.remember("person", name="Hank Scorpio", email="hank@globex.com")
    await m.remember("company", name="Globex Corporation")
    async with m.turn("What about Hank Scorpio and Globex Corporation?", turn_id="t1") as t:
        assert sorted(e.name for e in t.retrieved) == ["Globex Corporation", "Hank Scorpio"]
        t.reply = "ok"


# --- show numbers turns as history does -------------------------------------------------


async def test_show_numbers_turns_by_their_stored_number(store: Transport) -> None:
    m = memory(store, conversation_id="numbered")
    await m.record_turn("first", "one", turn_id="a", turn_number=98)
    await m.record_turn("second", "two", turn_id="b", turn_number=99)
    await m.record_turn("third", "three", turn_id="c")  # no number: its position
    history = await m.history()
    transcript = await load_transcript(store, "numbered")
    assert [t.number for t in transcript.turns][:2] == [h.turn_number for h in history][:2]
    assert [t.number for t in transcript.turns] == [98, 99, 3]
    out = io.StringIO()
    render_transcript(transcript, out)
    assert "turn 99 [b]" in out.getvalue()
