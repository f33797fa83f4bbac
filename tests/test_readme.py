"""The README's tour runs as written, and stores what the README says it stores.

The tour's code block (the one after the ``readme-tour`` marker) is pulled out of
README.md and run twice: once in this process with its stand-in model swapped for a fake
streaming agent that records the prompts it is given, once as a script in a subprocess,
as a reader who saved it as ``tour.py`` would run it. What it stored is read back through
the library's public reads on the store file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli, ok

from neotoma_agent import EmbeddedStore, NeotomaMemory

# The README's code runs on whichever loop it is given; the engine's trio runs are its own tests.
pytestmark = pytest.mark.one_backend

README = Path(__file__).resolve().parent.parent / "README.md"
#: the guides the README's sections moved to
CLI_GUIDE = README.parent / "docs" / "cli.md"
TOOLS_GUIDE = README.parent / "docs" / "tool-calls.md"
MARKER = "<!-- readme-tour:"
CHUNKS = ("Acme Corp ", "is a customer ", "(acme.com).")
ENTITY_ID = re.compile(r"ent_[0-9a-f]{24}")


def tour_source() -> str:
    """The first ```python block after the marker."""
    text = README.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, "the README has one tour marker"
    after = text[text.index(MARKER) :]
    match = re.search(r"```python\n(.*?)\n```", after, re.DOTALL)
    assert match is not None, "a python block follows the marker"
    return match.group(1)


class FakeModel:
    """A streaming agent: yields ``CHUNKS`` one by one and records every prompt."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> AsyncIterator[str]:
        self.prompts.append(prompt)
        for chunk in CHUNKS:
            yield chunk


def load_tour() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "readme_tour"}
    exec(compile(tour_source(), str(README), "exec"), namespace)
    return namespace


async def seeded_ids(store: EmbeddedStore) -> tuple[str, str]:
    """The ids of the tour's two seeded entities, found by name."""
    ids = []
    for entity_type, name in (("company", "Acme Corp"), ("person", "Ana Lopez")):
        found = await store.retrieve_entity_by_identifier(name, entity_type=entity_type)
        (entity,) = found.entities
        ids.append(entity.id)
    return ids[0], ids[1]


@pytest.mark.anyio
async def test_the_tour_stores_a_complete_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tour = load_tour()
    model = FakeModel()
    tour["llm"] = model  # what the reader replaces with their model's streaming call
    path = tmp_path / "memory.db"
    await tour["main"](str(path))

    async with EmbeddedStore.open(path) as store:
        acme, ana = await seeded_ids(store)
        memory = NeotomaMemory(store, conversation_id="chat-42")
        first, second = await memory.history(limit=None)

        # The exact messages: the streamed chunks, then the remembered task cited by id.
        assert first.user == "What do we know about Acme Corp?"
        assert second.user == "Set up a call with Ana Lopez."
        streamed = "".join(CHUNKS)
        tasks = []
        for turn in (first, second):
            assert turn.status == "completed"
            assert turn.reply is not None
            assert turn.reply.startswith(streamed + " (follow-up: ")
            (task_id,) = ENTITY_ID.findall(turn.reply)
            tasks.append(task_id)

        # REFERS_TO: the seeded entity retrieval found and the entity the reply produced.
        assert set(first.reply_refers_to) == {acme, tasks[0]}
        assert set(second.reply_refers_to) == {ana, tasks[1]}
        assert first.user_refers_to == (acme,)
        for task_id, question in zip(tasks, (first.user, second.user), strict=True):
            snap = await store.get_entity_snapshot(task_id)
            assert snap.entity_type == "task"
            assert snap.snapshot["title"] == f"Follow up: {question}"
            assert snap.snapshot["status"] == "open"

    # What the model was given: the context block, with the history on the second turn.
    prompt_1, prompt_2 = model.prompts
    assert f'company "Acme Corp" [{acme}]: website=acme.com' in prompt_1
    assert "Earlier in this conversation" not in prompt_1
    assert prompt_1.endswith("\n\nUser: What do we know about Acme Corp?")
    assert f'person "Ana Lopez" [{ana}]: role=CTO; organization=Acme Corp' in prompt_2
    assert "Earlier in this conversation (oldest first):" in prompt_2
    assert "· completed] user: What do we know about Acme Corp?" in prompt_2
    assert f"· completed] assistant: {first.reply}" in prompt_2

    out = capsys.readouterr().out
    assert "[0 earlier turns, 1 entities]" in out
    # Ana Lopez, then what the last turn named and produced (shown, not linked).
    assert "[1 earlier turns, 3 entities]" in out
    assert out.count("completed: reply ent_") == 2


@pytest.mark.anyio
async def test_the_tour_seeds_once_when_run_again(tmp_path: Path) -> None:
    """A second run replays the seeds (no second Acme Corp) and adds two more turns."""
    tour = load_tour()
    tour["llm"] = FakeModel()
    path = tmp_path / "memory.db"
    await tour["main"](str(path))
    await tour["main"](str(path))
    async with EmbeddedStore.open(path) as store:
        await seeded_ids(store)  # exactly one entity each
        history = await NeotomaMemory(store, conversation_id="chat-42").history(limit=None)
        assert len(history) == 4


@pytest.mark.anyio
async def test_the_tour_run_twice_retrieves_the_company_and_links_nothing_wrong(
    tmp_path: Path,
) -> None:
    """Issue 22: the first run's follow-up tasks ("Follow up: What do we know about Acme
    Corp?") contain the company's name; the second run still retrieves the company itself
    (its website reaches the prompt) and links only what each question names."""
    tour = load_tour()
    model = FakeModel()
    tour["llm"] = model
    path = tmp_path / "memory.db"
    await tour["main"](str(path))
    await tour["main"](str(path))
    async with EmbeddedStore.open(path) as store:
        acme, ana = await seeded_ids(store)
        turns = await NeotomaMemory(store, conversation_id="chat-42").history(limit=None)
    assert [t.user_refers_to for t in turns] == [(acme,), (ana,), (acme,), (ana,)]
    for turn, named in zip(turns, (acme, ana, acme, ana), strict=True):
        assert turn.reply is not None
        (task,) = ENTITY_ID.findall(turn.reply)
        assert set(turn.reply_refers_to) == {named, task}  # no earlier follow-up task
    again = model.prompts[2]
    assert f'company "Acme Corp" [{acme}]: website=acme.com' in again
    assert "Known entities (best match first):\n- company" in again
    # The last turns' follow-up tasks are shown (recent), after the company, never linked.
    known = again.split("Earlier in this conversation")[0]
    assert known.index('company "Acme Corp"') < known.index('task "Follow up')


def test_the_tour_runs_as_a_script(tmp_path: Path) -> None:
    """Saved as tour.py and run, with its own stand-in model: it writes memory.db here."""
    (tmp_path / "tour.py").write_text(tour_source(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "tour.py"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("completed: reply ent_") == 2
    assert "Acme Corp (acme.com) is a customer; Ana Lopez is their CTO.\n" in result.stdout
    assert (tmp_path / "memory.db").is_file()


COMMANDS = (
    "demo",
    "chat",
    "show",
    "search",
    "import",
    "stats",
    "audit",
    "outbox",
    "serve",
    "hook",
    "hooks",
)
# Options every command takes, described once under "Global options".
GLOBAL_OPTIONS = frozenset(
    ("--db", "--url", "--token", "--token-file", "--log-level", "--log-json", "--help")
)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_table_lists_every_option_of_the_command(command: str, tmp_path: Path) -> None:
    helptext = ok(cli(command, "--help", home=tmp_path))
    options = set(re.findall(r"^\s+(--[a-z][a-z-]*)", helptext, re.M)) - GLOBAL_OPTIONS
    rows = [line for line in CLI_GUIDE.read_text("utf-8").splitlines() if line.startswith("| `")]
    row = next(r for r in rows if r.startswith(f"| `{command} ") or r.startswith(f"| `{command}`"))
    listed = row.split("|")[1]
    assert {o for o in options if o not in listed} == set(), row


def test_the_tool_calls_section_runs_as_written(tmp_path: Path) -> None:
    text = TOOLS_GUIDE.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)\n```", text, re.DOTALL)
    assert match is not None
    script = tmp_path / "tools_section.py"
    script.write_text(match.group(1), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    # by invoked_at (here often one millisecond for both), then by name
    book, search = sorted(result.stdout.splitlines())
    assert book == "book error 41.5 {'offer': 'AB1'}"
    assert search.startswith("search_flights ok ")
    assert search.endswith(" {'to': 'LIS'}")
