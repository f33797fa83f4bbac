"""Every example runs, offline: each model client is a fake shaped like its SDK's.

The fakes copy the parts of each SDK the examples use (``openai.AsyncOpenAI``:
``await client.chat.completions.create(...)`` returning a stream of chunks, or a message
with tool calls; ``anthropic.AsyncAnthropic``: ``async with client.messages.stream(...)``
and its ``text_stream``), so the examples cannot rot without a test failing. What a turn
stored is read back from the store, as ``neotoma-agent show`` reads it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import anyio
import pytest

from neotoma_agent.cli._show import Transcript, load_transcript
from neotoma_agent.transport.embedded import EmbeddedStore

# The examples run on whichever loop they are given; the engine's trio runs are its own tests.
pytestmark = pytest.mark.one_backend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def transcript(path: Path, conversation_id: str) -> Transcript:
    """What the store file holds for one conversation."""
    async with EmbeddedStore.open(path) as store:
        return await load_transcript(store, conversation_id)


class ModelDown(ConnectionError):
    """The fake model's stream breaks off."""


# --- a fake openai.AsyncOpenAI -------------------------------------------------------------


class FakeOpenAIStream:
    """``AsyncStream[ChatCompletionChunk]``: chunks with ``choices[0].delta.content``."""

    def __init__(self, pieces: Sequence[str], fail_after: int | None) -> None:
        self.pieces = pieces
        self.fail_after = fail_after

    async def __aiter__(self) -> AsyncIterator[Any]:
        yield SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content=None))])
        for i, piece in enumerate(self.pieces):
            if i == self.fail_after:
                raise ModelDown("the stream broke off")
            yield SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content=piece))])
        yield SimpleNamespace(choices=[])  # the usage chunk carries no choices


class FakeCompletions:
    def __init__(self, answer: Callable[[dict[str, Any]], Any]) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> Any:
        self.calls.append(json.loads(json.dumps(kwargs)))  # a copy, as sent
        return self.answer(kwargs)


class FakeOpenAI:
    """``openai.AsyncOpenAI``, as far as the examples use it."""

    def __init__(self, answer: Callable[[dict[str, Any]], Any]) -> None:
        self.completions = FakeCompletions(answer)
        self.chat = SimpleNamespace(completions=self.completions)


def streaming_openai(pieces: Sequence[str], fail_after: int | None = None) -> FakeOpenAI:
    def answer(kwargs: dict[str, Any]) -> Any:
        assert kwargs["stream"] is True
        return FakeOpenAIStream(pieces, fail_after)

    return FakeOpenAI(answer)


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    function = SimpleNamespace(name=name, arguments=json.dumps(arguments))
    return SimpleNamespace(id=call_id, type="function", function=function)


def completion(content: str | None = None, tool_calls: list[Any] | None = None) -> Any:
    message = SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")])


def scripted_openai(*responses: Any) -> FakeOpenAI:
    queue = list(responses)

    def answer(kwargs: dict[str, Any]) -> Any:
        response = queue.pop(0)
        if isinstance(response, BaseException):
            raise response
        return response

    return FakeOpenAI(answer)


# --- a fake anthropic.AsyncAnthropic -------------------------------------------------------


class FakeMessageStream:
    """``AsyncMessageStream``: ``text_stream`` yields the text deltas."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.text_stream = self._text(pieces)

    async def _text(self, pieces: Sequence[str]) -> AsyncIterator[str]:
        for piece in pieces:
            yield piece


class FakeStreamManager:
    """``AsyncMessageStreamManager``: ``async with`` gives the message stream."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = pieces
        self.exited = False

    async def __aenter__(self) -> FakeMessageStream:
        return FakeMessageStream(self.pieces)

    async def __aexit__(self, *exc: object) -> None:
        self.exited = True


class FakeAnthropic:
    """``anthropic.AsyncAnthropic``, as far as the example uses it."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = pieces
        self.calls: list[dict[str, Any]] = []
        self.managers: list[FakeStreamManager] = []
        self.messages = self

    def stream(self, **kwargs: Any) -> FakeStreamManager:
        self.calls.append(kwargs)
        manager = FakeStreamManager(self.pieces)
        self.managers.append(manager)
        return manager


# --- the examples --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_plain_agent(tmp_path: Path) -> None:
    example = load_example("plain_agent")
    out = io.StringIO()
    first, second = await example.main(tmp_path / "m.db", out=out)
    assert first.completed
    assert len(first.retrieved_ids) == 1
    assert first.produced_ids == ()
    (task,) = second.produced_ids  # nothing known about Globex: a follow-up task
    assert "agent: From memory: Acme Corp (company, acme.com).\n" in out.getvalue()
    stored = await transcript(tmp_path / "m.db", "plain-example")
    assert [m.content for m in stored.turns[1].messages] == [
        "Have we met Globex yet?",
        f"I don't know anything about that yet; I noted task {task}."
        " (Earlier you asked: What do we know about Acme Corp?)",  # from turn.history
    ]
    assert [r.name for r in stored.turns[0].messages[1].refers_to] == ["Acme Corp"]
    assert [(r.entity_id, r.name) for r in stored.turns[1].messages[1].refers_to] == [
        (task, "Find out: Have we met Globex yet?")
    ]


@pytest.mark.anyio
async def test_plain_agent_run_again_sees_the_earlier_turns(tmp_path: Path) -> None:
    """The seed replays (one Acme Corp), and the history is bounded by history_turns=3."""
    example = load_example("plain_agent")
    await example.main(tmp_path / "m.db", out=io.StringIO())
    first, _ = await example.main(tmp_path / "m.db", out=io.StringIO())
    assert len(first.retrieved_ids) == 1
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        found = await store.retrieve_entity_by_identifier("Acme Corp", entity_type="company")
        assert len(found.entities) == 1
    stored = await transcript(tmp_path / "m.db", "plain-example")
    assert (
        stored.turns[2].messages[1].content.endswith("(Earlier you asked: Have we met Globex yet?)")
    )


@pytest.mark.anyio
async def test_openai_streaming_stores_the_streamed_reply(tmp_path: Path) -> None:
    example = load_example("openai_streaming")
    client = streaming_openai(["Acme Corp ", "is a client ", "(acme.com)."])
    out = io.StringIO()
    result = await example.main(client, path=tmp_path / "m.db", out=out)
    assert result.completed
    (acme,) = result.retrieved_ids
    (task,) = result.produced_ids
    assert f"assistant: Acme Corp is a client (acme.com). (follow-up: {task})\n" in out.getvalue()
    (call,) = client.completions.calls
    assert call["messages"][1] == {"role": "user", "content": "What do we know about Acme Corp?"}
    system = call["messages"][0]["content"]
    assert f'company "Acme Corp" [{acme}]: website=acme.com' in system  # t.context()
    assert "Earlier in this conversation" not in system
    (turn,) = (await transcript(tmp_path / "m.db", "openai-example")).turns
    assert turn.messages[1].content == f"Acme Corp is a client (acme.com). (follow-up: {task})"
    assert {(r.entity_id, r.name) for r in turn.messages[1].refers_to} == {
        (acme, "Acme Corp"),
        (task, "Follow up: What do we know about Acme Corp?"),
    }


@pytest.mark.anyio
async def test_openai_streaming_sees_the_earlier_turns(tmp_path: Path) -> None:
    """Run twice on one file: the second turn's system prompt holds the first turn."""
    example = load_example("openai_streaming")
    first = await example.main(
        streaming_openai(["Acme Corp ", "is a client."]), path=tmp_path / "m.db", out=io.StringIO()
    )
    client = streaming_openai(["Yes."])
    await example.main(client, question="Is it still?", path=tmp_path / "m.db", out=io.StringIO())
    (call,) = client.completions.calls
    system = call["messages"][0]["content"]
    (task,) = first.produced_ids
    assert "Earlier in this conversation (oldest first):" in system
    assert "completed] user: What do we know about Acme Corp?" in system
    assert f"completed] assistant: Acme Corp is a client. (follow-up: {task})" in system


@pytest.mark.anyio
async def test_openai_stream_that_breaks_off_is_recorded_as_abandoned(tmp_path: Path) -> None:
    example = load_example("openai_streaming")
    client = streaming_openai(["Acme Corp ", "is a ", "never shown"], fail_after=2)
    with pytest.raises(ModelDown):
        await example.main(client, path=tmp_path / "m.db", out=io.StringIO())
    (turn,) = (await transcript(tmp_path / "m.db", "openai-example")).turns
    assert turn.status == "abandoned"
    assert turn.messages[1].content == "Acme Corp is a "  # exactly what was shown


@pytest.mark.anyio
async def test_anthropic_streaming(tmp_path: Path) -> None:
    example = load_example("anthropic_streaming")
    client = FakeAnthropic(["Acme Corp ", "(acme.com) ", "is a client."])
    out = io.StringIO()
    result = await example.main(client, path=tmp_path / "m.db", out=out)
    assert result.completed
    (acme,) = result.retrieved_ids
    (task,) = result.produced_ids
    reply = f"Acme Corp (acme.com) is a client. (follow-up: {task})"
    assert f"assistant: {reply}\n" in out.getvalue()
    (call,) = client.calls
    assert call["messages"] == [{"role": "user", "content": "What do we know about Acme Corp?"}]
    assert f'company "Acme Corp" [{acme}]: website=acme.com' in call["system"]  # t.context()
    assert client.managers[0].exited
    (turn,) = (await transcript(tmp_path / "m.db", "anthropic-example")).turns
    assert turn.messages[1].content == reply
    assert {(r.entity_id, r.name) for r in turn.messages[1].refers_to} == {
        (acme, "Acme Corp"),
        (task, "Follow up: What do we know about Acme Corp?"),
    }
    # Run again on the same file: Claude is given the first turn.
    again = FakeAnthropic(["Yes."])
    await example.main(again, question="Still?", path=tmp_path / "m.db", out=io.StringIO())
    assert f"completed] assistant: {reply}" in again.calls[0]["system"]


@pytest.mark.anyio
async def test_tool_loop_closes_the_turn_with_what_the_tools_touched(tmp_path: Path) -> None:
    example = load_example("tools")
    client = scripted_openai(
        completion(tool_calls=[tool_call("c1", "lookup", {"name": "Acme Corp"})]),
        completion(
            tool_calls=[
                tool_call(
                    "c2",
                    "remember",
                    {"entity_type": "person", "name": "Ana Lopez", "facts": {"role": "CTO"}},
                ),
                tool_call(
                    "c3",
                    "remember",
                    {"entity_type": "company", "name": "Acme Corp", "facts": {"address": "Lisbon"}},
                ),
            ]
        ),
        completion("Acme Corp (acme.com) moved to Lisbon; I noted Ana Lopez, their CTO."),
    )
    out = io.StringIO()
    result = await example.main(client, path=tmp_path / "m.db", out=out)
    assert result.completed
    assert len(client.completions.calls) == 3
    first, last = client.completions.calls[0]["messages"], client.completions.calls[-1]["messages"]
    (acme,) = result.retrieved_ids
    assert f'company "Acme Corp" [{acme}]: website=acme.com' in first[0]["content"]
    roles = ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    assert [m["role"] for m in last] == roles
    assert "acme.com" in last[3]["content"]  # the lookup's result went back to the model

    # The remember tool's results: ids at once, the entities stored with the reply.
    ana = json.loads(last[5]["content"])["stored"]
    assert json.loads(last[6]["content"]) == {"stored": acme}  # extended, not duplicated
    assert set(result.produced_ids) == {ana, acme}
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        person = await store.get_entity_snapshot(ana)
        company = await store.get_entity_snapshot(acme)
        companies = await store.retrieve_entity_by_identifier("Acme Corp", entity_type="company")
    assert (person.entity_type, person.snapshot["name"], person.snapshot["role"]) == (
        "person",
        "Ana Lopez",
        "CTO",
    )
    assert (company.snapshot["website"], company.snapshot["address"]) == ("acme.com", "Lisbon")
    assert [e.id for e in companies.entities] == [acme]

    (turn,) = (await transcript(tmp_path / "m.db", "tool-loop-example")).turns
    assert turn.status == "completed"
    user, reply = turn.messages
    assert user.content.startswith("Acme Corp just told us")
    assert reply.content == "Acme Corp (acme.com) moved to Lisbon; I noted Ana Lopez, their CTO."
    assert {(r.entity_id, r.name) for r in reply.refers_to} == {
        (acme, "Acme Corp"),
        (ana, "Ana Lopez"),
    }


@pytest.mark.anyio
async def test_tools_example_records_each_call_offline(tmp_path: Path) -> None:
    example = load_example("tools")
    out = io.StringIO()
    result = await example.main(path=tmp_path / "m.db", out=out)  # the scripted model
    assert result.completed
    assert [(c.name, c.status, c.call_id) for c in result.tools] == [
        ("lookup", "ok", "call_1"),
        ("remember", "ok", "call_2"),
    ]
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        for tool_id in result.tool_ids:
            snap = await store.get_entity_snapshot(tool_id)
            assert snap.entity_type == "tool_invocation"
            assert snap.snapshot["result_status"] == "ok"
    assert "  remember: ok" in out.getvalue()


@pytest.mark.anyio
async def test_tool_loop_gives_the_model_the_conversation_so_far(tmp_path: Path) -> None:
    example = load_example("tools")
    await example.main(
        scripted_openai(completion("Noted.")),
        question="Hello",
        path=tmp_path / "m.db",
        out=io.StringIO(),
    )
    client = scripted_openai(completion("Still noted."))
    await example.main(client, question="Again", path=tmp_path / "m.db", out=io.StringIO())
    (call,) = client.completions.calls
    assert call["messages"][1:] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Again"},
    ]


@pytest.mark.anyio
async def test_tool_loop_tells_the_model_when_remember_is_refused(tmp_path: Path) -> None:
    example = load_example("tools")
    client = scripted_openai(
        completion(
            tool_calls=[tool_call("c1", "remember", {"entity_type": "conversation", "name": "x"})]
        ),
        completion("I could not store that."),
    )
    result = await example.main(client, path=tmp_path / "m.db", out=io.StringIO())
    assert result.completed
    assert result.produced_ids == ()
    tool_answer = json.loads(client.completions.calls[-1]["messages"][-1]["content"])
    assert "only turns write it" in tool_answer["error"]


@pytest.mark.anyio
async def test_tool_loop_that_fails_records_the_turn_as_abandoned(tmp_path: Path) -> None:
    example = load_example("tools")
    client = scripted_openai(
        completion(tool_calls=[tool_call("c1", "lookup", {"name": "Acme Corp"})]),
        ModelDown("the API is down"),
    )
    with pytest.raises(ModelDown):
        await example.main(client, path=tmp_path / "m.db", out=io.StringIO())
    (turn,) = (await transcript(tmp_path / "m.db", "tool-loop-example")).turns
    assert turn.status == "abandoned"
    assert turn.error_class == "test_examples.ModelDown"
    assert [m.role for m in turn.messages] == ["user"]


def test_sync_script_stores_both_turns_without_an_event_loop(tmp_path: Path) -> None:
    example = load_example("sync_script")
    out = io.StringIO()
    first, second = example.main(tmp_path / "m.db", out=out)  # a plain call: no await
    assert (first.stored_status, second.stored_status) == ("completed", "completed")
    (acme,) = first.retrieved_ids
    assert [(c.name, c.status, c.result) for c in second.tools] == [
        ("directory_lookup", "ok", "Ana Lopez")
    ]
    (ana,) = second.produced_ids
    stored = anyio.run(transcript, tmp_path / "m.db", "sync-example")
    assert [m.content for m in stored.turns[0].messages] == [
        "What do we know about Acme Corp?",
        f'From memory: company "Acme Corp" [{acme}]: website=acme.com.',
    ]
    assert stored.turns[1].messages[1].content == f"Ana Lopez ({ana}), according to the directory."
    assert "history: completed: 'Who is their CTO?'" in out.getvalue()


@pytest.mark.parametrize("name", ["store_and_read", "plain_agent", "tools", "sync_script"])
def test_offline_examples_run_as_scripts(tmp_path: Path, name: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout
    assert (tmp_path / "x.db").is_file()


_SDK_EXAMPLES = [
    ("openai_streaming", "openai", ()),
    ("anthropic_streaming", "anthropic", ()),
    ("tools", "openai", ("--openai",)),
]


@pytest.mark.parametrize(("name", "sdk", "args"), _SDK_EXAMPLES)
def test_sdk_examples_say_what_to_install(name: str, sdk: str, args: tuple[str, ...]) -> None:
    if importlib.util.find_spec(sdk) is not None:
        pytest.skip(f"{sdk} is installed")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert f"pip install {sdk}" in result.stderr
    assert "Traceback" not in result.stderr


_UNREACHABLE_SDKS = {
    "openai": """
class _Completions:
    async def create(self, **kw):
        raise ConnectionError("Connection error.")
class _Chat:
    completions = _Completions()
class AsyncOpenAI:
    chat = _Chat()
""",
    "anthropic": """
class _Messages:
    def stream(self, **kw):
        raise ConnectionError("Connection error.")
class AsyncAnthropic:
    messages = _Messages()
""",
}


@pytest.mark.parametrize(("name", "sdk", "args"), _SDK_EXAMPLES)
def test_sdk_examples_end_with_one_line_when_the_sdk_cannot_connect(
    tmp_path: Path, name: str, sdk: str, args: tuple[str, ...]
) -> None:
    """An installed SDK that cannot reach its API: one clear line, not a traceback."""
    (tmp_path / f"{sdk}.py").write_text(_UNREACHABLE_SDKS[sdk])
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    # The library's own WARNING (turn.abandoned) may precede it; then the one line.
    assert result.stderr.strip().splitlines()[-1] == (
        "stopped: ConnectionError: Connection error. (the turn is stored as abandoned)"
    )
    assert len(result.stderr.strip().splitlines()) <= 2


def test_store_and_read_reads_the_raw_turn_back_as_history(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "store_and_read.py"), str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last == "history: turn t1 (open): 'What do we know about Acme Corp?'"
