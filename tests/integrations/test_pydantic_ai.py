"""Pydantic AI: the turn's three rules on every entry point, with Pydantic AI's own test models.

Each entry point (``run``, ``run_sync``, ``run_stream``, ``iter``, ``run_stream_events``) ×
completed / raised / cancelled / no final output, against a real SQLite store; the model is
Pydantic AI's ``FunctionModel`` (a stream function that can yield, raise or block) or
``TestModel``. What a turn stored is read back with ``memory.history()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the [pydantic-ai] extra is not installed")

import pydantic
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    CancellationToken,
    DeferredToolRequests,
    DeferredToolResults,
    ImageUrl,
    RunCancelled,
    UnexpectedModelBehavior,
    models,
)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel
from structlog.testing import capture_logs

from neotoma_agent import EmbeddedStore, NeotomaMemory, Turn, current_turn
from neotoma_agent.integrations.pydantic_ai import NeotomaCapability

pytestmark = pytest.mark.anyio
models.ALLOW_MODEL_REQUESTS = False  # a real model would need the network: never here

NO_REPLY = "neotoma_agent.integrations.NoFinalReply"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Pydantic AI runs on asyncio only


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[NeotomaMemory]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        mem = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
        await mem.remember("company", name="Acme Corp", website="acme.com")
        yield mem


class Boom(RuntimeError):
    """The model fails mid-stream."""


@dataclass
class Script:
    """A stream function: yields ``chunks``, then raises ``fail`` or blocks if asked.

    ``seen`` records what the model was given at each request (the instructions and the
    conversation's stored turns at that moment: rule 1 is read from it).
    """

    memory: NeotomaMemory
    chunks: tuple[str, ...] = ("Acme is ", "a customer.")
    fail: BaseException | None = None
    block: bool = False
    tool: str | None = None
    shown: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        stored = [(h.user, h.status) for h in await self.memory.history(limit=None)]
        self.seen.append({"instructions": info.instructions, "stored": stored})
        if self.tool is not None and len(self.seen) == 1:
            yield {0: DeltaToolCall(name=self.tool, json_args="{}", tool_call_id="call-1")}
            return
        for chunk in self.chunks:
            yield chunk
        self.shown.set()
        if self.fail is not None:
            raise self.fail
        if self.block:
            await asyncio.Event().wait()

    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self)


def agent_for(memory: NeotomaMemory, script: Script, **kw: Any) -> Agent[None, Any]:
    return Agent(script.model(), capabilities=[NeotomaCapability(memory, **kw)])


# --- the entry points, each driven as a caller would --------------------------------------


async def via_run(agent: Agent[None, Any], prompt: Any, **kw: Any) -> Any:
    return (await agent.run(prompt, **kw)).output


async def via_run_stream(agent: Agent[None, Any], prompt: Any, **kw: Any) -> Any:
    async with agent.run_stream(prompt, **kw) as streamed:
        async for _ in streamed.stream_output(debounce_by=None):
            pass
        return await streamed.get_output()


async def via_iter(agent: Agent[None, Any], prompt: Any, **kw: Any) -> Any:
    async with agent.iter(prompt, **kw) as run:
        async for _node in run:
            pass
    assert run.result is not None
    return run.result.output


async def via_events(agent: Agent[None, Any], prompt: Any, **kw: Any) -> Any:
    output: Any = None
    async with agent.run_stream_events(prompt, **kw) as events:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                output = event.result.output
    return output


Drive = Callable[..., Awaitable[Any]]
ENTRY_POINTS: dict[str, Drive] = {
    "run": via_run,
    "run_stream": via_run_stream,
    "iter": via_iter,
    "run_stream_events": via_events,
}
entry_points = pytest.mark.parametrize("drive", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())


async def stored(memory: NeotomaMemory) -> list[tuple[str, str | None, str]]:
    return [(h.user, h.reply, h.status) for h in await memory.history(limit=None)]


def abandoned_error_classes(logs: list[dict[str, Any]]) -> list[str]:
    return [e["error_class"] for e in logs if e["event"] == "turn.abandoned"]


# --- completed ------------------------------------------------------------------------------


@entry_points
async def test_a_completed_run_stores_the_user_message_first_and_the_exact_reply_once(
    memory: NeotomaMemory, drive: Drive
) -> None:
    script = Script(memory)
    output = await drive(agent_for(memory, script), "What about Acme Corp?")
    assert output == "Acme is a customer."
    # Rule 1: while the model ran, the turn was stored open with the user's text.
    assert script.seen[0]["stored"] == [("What about Acme Corp?", "open")]
    assert await stored(memory) == [("What about Acme Corp?", "Acme is a customer.", "completed")]


def test_run_sync_stores_the_turn(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        store = loop.run_until_complete(EmbeddedStore.open(tmp_path / "m.db").__aenter__())
        mem = NeotomaMemory(store, conversation_id="chat-1")
        script = Script(mem)
        result = agent_for(mem, script).run_sync("What about Acme Corp?")
        assert result.output == "Acme is a customer."
        assert script.seen[0]["stored"] == [("What about Acme Corp?", "open")]
        assert loop.run_until_complete(stored(mem)) == [
            ("What about Acme Corp?", "Acme is a customer.", "completed")
        ]
        script = Script(mem, fail=Boom("model down"))
        with pytest.raises(Boom):
            agent_for(mem, script).run_sync("Try again")
        assert loop.run_until_complete(stored(mem))[-1] == (
            "Try again",
            "Acme is a customer.",
            "abandoned",
        )
        loop.run_until_complete(store.aclose())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_run_sync_abandons_a_timed_out_run_and_one_waiting_for_approval(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        store = loop.run_until_complete(EmbeddedStore.open(tmp_path / "m.db").__aenter__())
        mem = NeotomaMemory(store, conversation_id="chat-1")
        # cancelled: the framework's own timeout, on a model that shows text, then blocks
        script = Script(mem, chunks=("shown ",), block=True)
        with pytest.raises(RunCancelled):  # RunTimedOut, a RunCancelled
            agent_for(mem, script).run_sync("Run timeout", timeout=1.0)
        [(user, reply, status)] = loop.run_until_complete(stored(mem))
        assert (user, status) == ("Run timeout", "abandoned")
        assert reply in ("shown ", None)  # the deadline may come before the first chunk
        # no final output: a tool call waiting for approval
        script = Script(mem, chunks=("Email sent.",), tool="send_email")
        output = approval_agent(mem, script).run_sync("Send the email").output
        assert isinstance(output, DeferredToolRequests)
        assert loop.run_until_complete(stored(mem))[-1] == ("Send the email", None, "abandoned")
        loop.run_until_complete(store.aclose())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def test_the_test_model_path_is_recorded_too(memory: NeotomaMemory) -> None:
    agent = Agent(
        TestModel(custom_output_text="Plain answer."), capabilities=[NeotomaCapability(memory)]
    )
    assert (await agent.run("Hello")).output == "Plain answer."
    assert await stored(memory) == [("Hello", "Plain answer.", "completed")]


async def test_a_capability_given_for_one_run_records_that_run(memory: NeotomaMemory) -> None:
    script = Script(memory)
    agent = Agent(script.model())
    await agent.run("Not recorded", model=TestModel())
    await agent.run("Recorded", capabilities=[NeotomaCapability(memory)])
    assert await stored(memory) == [("Recorded", "Acme is a customer.", "completed")]


async def test_one_capability_keeps_concurrent_runs_apart(memory: NeotomaMemory) -> None:
    # One capability on one agent, two runs at once: each run's streamed text and reply go
    # to its own turn (the slow one cancelled after showing its text), and each run's
    # model gets a context.
    shown = asyncio.Event()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        assert info.instructions is not None
        assert 'company "Acme Corp"' in info.instructions
        if prompt.startswith("Slow"):
            yield "slow text "
            shown.set()
            await asyncio.Event().wait()
        await shown.wait()
        yield "fast reply"

    agent = Agent(FunctionModel(stream_function=stream), capabilities=[NeotomaCapability(memory)])
    slow = asyncio.ensure_future(agent.run("Slow question about Acme Corp"))
    fast = asyncio.ensure_future(agent.run("Fast question about Acme Corp"))
    assert (await fast).output == "fast reply"
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert sorted(await stored(memory)) == [
        ("Fast question about Acme Corp", "fast reply", "completed"),
        ("Slow question about Acme Corp", "slow text ", "abandoned"),
    ]


# --- raised ---------------------------------------------------------------------------------


@entry_points
async def test_a_model_error_abandons_the_turn_with_the_partial_text_and_propagates(
    memory: NeotomaMemory, drive: Drive
) -> None:
    error = Boom("model down")
    script = Script(memory, chunks=("half ",), fail=error)
    with capture_logs() as logs, pytest.raises(Boom) as caught:
        await drive(agent_for(memory, script), "Error turn")
    assert caught.value is error
    assert await stored(memory) == [("Error turn", "half ", "abandoned")]
    assert abandoned_error_classes(logs) == [f"{__name__}.Boom"]


async def test_a_tool_error_abandons_the_turn(memory: NeotomaMemory) -> None:
    script = Script(memory, tool="lookup")
    agent = agent_for(memory, script)

    @agent.tool_plain
    def lookup() -> str:
        raise Boom("tool down")

    with pytest.raises(Boom):
        await agent.run("Look it up")
    assert await stored(memory) == [("Look it up", None, "abandoned")]


async def test_an_output_validation_failure_abandons_the_turn(memory: NeotomaMemory) -> None:
    script = Script(memory, chunks=("not json",))
    agent = Agent(
        script.model(), output_type=int, capabilities=[NeotomaCapability(memory)], retries=0
    )
    with pytest.raises(UnexpectedModelBehavior):
        await agent.run("Give me a number")
    [(user, _reply, status)] = await stored(memory)
    assert (user, status) == ("Give me a number", "abandoned")


# --- cancelled ------------------------------------------------------------------------------


@entry_points
async def test_a_cancelled_task_abandons_the_turn_with_what_the_user_saw(
    memory: NeotomaMemory, drive: Drive
) -> None:
    script = Script(memory, chunks=("shown to user ",), block=True)
    task = asyncio.ensure_future(drive(agent_for(memory, script), "Cancel turn"))
    await script.shown.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(memory) == [("Cancel turn", "shown to user ", "abandoned")]


@entry_points
async def test_an_asyncio_timeout_abandons_the_turn_and_raises_timeout_error(
    memory: NeotomaMemory, drive: Drive
) -> None:
    script = Script(memory, chunks=("shown ",), block=True)

    async def expire_once_shown(deadline: asyncio.Timeout) -> None:
        await script.shown.wait()
        deadline.reschedule(asyncio.get_running_loop().time())

    async def attempt() -> None:
        async with asyncio.timeout(None) as deadline:
            expiry = asyncio.ensure_future(expire_once_shown(deadline))
            await drive(agent_for(memory, script), "Timeout turn")
        await expiry

    with pytest.raises(TimeoutError):
        await attempt()
    assert await stored(memory) == [("Timeout turn", "shown ", "abandoned")]


async def test_the_frameworks_cancellation_token_abandons_the_turn(memory: NeotomaMemory) -> None:
    script = Script(memory, chunks=("shown ",), block=True)
    token = CancellationToken()
    task = asyncio.ensure_future(
        agent_for(memory, script).run("Token turn", cancellation_token=token)
    )
    await script.shown.wait()
    token.cancel()
    with pytest.raises(RunCancelled):
        await task
    assert await stored(memory) == [("Token turn", "shown ", "abandoned")]


async def test_the_frameworks_timeout_abandons_the_turn(memory: NeotomaMemory) -> None:
    script = Script(memory, chunks=("shown ",), block=True)
    with pytest.raises(RunCancelled):  # RunTimedOut, a RunCancelled
        await agent_for(memory, script).run("Run timeout", timeout=1.0)
    [(user, reply, status)] = await stored(memory)
    assert (user, status) == ("Run timeout", "abandoned")
    assert reply in ("shown ", None)  # the deadline may come before the model's first chunk


async def test_breaking_out_of_iter_abandons_the_turn(memory: NeotomaMemory) -> None:
    script = Script(memory)
    async with agent_for(memory, script).iter("Leave early") as run:
        async for _node in run:
            break
    assert await stored(memory) == [("Leave early", None, "abandoned")]


async def test_leaving_a_stream_early_abandons_the_turn_with_what_was_shown(
    memory: NeotomaMemory,
) -> None:
    script = Script(memory, chunks=("first ", "second ", "third"))
    async with agent_for(memory, script).run_stream("Leave the stream") as streamed:
        async for _text in streamed.stream_text(delta=True, debounce_by=None):
            break
    [(user, reply, status)] = await stored(memory)
    assert (user, status) == ("Leave the stream", "abandoned")
    assert reply is not None
    assert reply.startswith("first ")


# --- no final output ------------------------------------------------------------------------


SENT: list[Turn] = []  # the turn each approved send_email ran in


def approval_agent(memory: NeotomaMemory, script: Script) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        script.model(),
        output_type=[str, DeferredToolRequests],
        capabilities=[NeotomaCapability(memory)],
    )

    SENT.clear()

    @agent.tool_plain(requires_approval=True)
    def send_email() -> str:
        turn = current_turn()
        assert turn is not None
        SENT.append(turn)
        return "sent"

    return agent


@entry_points
async def test_a_run_waiting_for_approval_is_abandoned_then_completed_on_resume(
    memory: NeotomaMemory, drive: Drive
) -> None:
    script = Script(memory, chunks=("Email sent.",), tool="send_email")
    agent = approval_agent(memory, script)
    with capture_logs() as logs:
        output = await drive(agent, "Send the email")
    assert isinstance(output, DeferredToolRequests)  # the caller gets the run's own result
    assert await stored(memory) == [("Send the email", None, "abandoned")]
    assert abandoned_error_classes(logs) == [NO_REPLY]


async def test_the_resumed_run_completes_the_turn_its_deferred_run_abandoned(
    memory: NeotomaMemory,
) -> None:
    script = Script(memory, chunks=("Email sent.",), tool="send_email")
    agent = approval_agent(memory, script)
    deferred = await agent.run("Send the email")
    assert isinstance(deferred.output, DeferredToolRequests)
    # The approval comes back: the resumed run has no prompt of its own (None).
    resumed = await agent.run(
        None,
        message_history=deferred.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call-1": True}),
    )
    assert resumed.output == "Email sent."
    [h] = await memory.history(limit=None)
    assert (h.user, h.reply, h.status) == ("Send the email", "Email sent.", "completed")
    assert h.turn_id == deferred.run_id


# --- what the model is given ----------------------------------------------------------------


async def test_the_context_reaches_the_model_as_instructions(memory: NeotomaMemory) -> None:
    script = Script(memory)
    await agent_for(memory, script).run("What about Acme Corp?")
    assert 'company "Acme Corp"' in script.seen[0]["instructions"]


async def test_the_context_can_be_turned_off_or_budgeted(memory: NeotomaMemory) -> None:
    script = Script(memory)
    await agent_for(memory, script, context=False).run("What about Acme Corp?")
    assert not script.seen[0]["instructions"]
    script = Script(memory)
    await agent_for(memory, script, context_chars=60).run("What about Acme Corp?")
    budgeted = script.seen[0]["instructions"]
    assert budgeted
    assert len(budgeted) <= 60


async def test_the_stored_history_is_given_once(memory: NeotomaMemory) -> None:
    script = Script(memory)
    agent = agent_for(memory, script)
    first = await agent.run("Hello there")
    # Without message_history, the stored history reaches the model in the context...
    await agent.run("What about Acme Corp?")
    assert "Hello there" in script.seen[1]["instructions"]
    # ...with it, only the entities do: the framework already sends the earlier messages.
    await agent.run("And Acme Corp again?", message_history=first.all_messages())
    assert "Hello there" not in script.seen[2]["instructions"]
    assert 'company "Acme Corp"' in script.seen[2]["instructions"]
    # ...and so with a conversation= that carries them.
    await agent.run("Once more about Acme Corp?", conversation=first.conversation)
    assert "Hello there" not in script.seen[3]["instructions"]
    assert 'company "Acme Corp"' in script.seen[3]["instructions"]


# --- tools ----------------------------------------------------------------------------------


async def test_a_tool_reaches_the_turn_to_remember_and_its_call_is_recorded(
    memory: NeotomaMemory,
) -> None:
    script = Script(memory, chunks=("Booked.",), tool="book")
    agent = agent_for(memory, script)
    turns: list[Turn] = []

    @agent.tool_plain
    def book() -> dict[str, str]:
        turn = current_turn()
        assert turn is not None
        turns.append(turn)
        return {"booking": turn.remember("booking", name="Table for two")}

    await agent.run("Book a table")
    [h] = await memory.history(limit=None)
    assert (h.user, h.reply, h.status) == ("Book a table", "Booked.", "completed")
    assert len(h.reply_refers_to) == 1
    [call] = turns[0].result.tools
    assert (call.name, call.status, call.call_id, call.args) == ("book", "ok", "call-1", {})
    assert call.result == {"booking": h.reply_refers_to[0]}
    assert call.duration_ms is not None
    snapshot = await memory.transport.get_entity_snapshot(turns[0].result.tool_ids[0])
    assert snapshot.snapshot["tool_name"] == "book"


async def test_a_tool_cites_an_entity_through_the_current_turn(memory: NeotomaMemory) -> None:
    beta = await memory.remember("company", name="Beta Ltd")
    script = Script(memory, chunks=("Found it.",), tool="find")
    agent = agent_for(memory, script)

    @agent.tool_plain
    def find() -> str:
        turn = current_turn()
        assert turn is not None
        turn.cite(beta)
        return beta

    await agent.run("Find it")
    [h] = await memory.history(limit=None)
    assert (h.reply, h.status) == ("Found it.", "completed")
    assert beta in h.reply_refers_to


async def test_a_failing_tool_is_recorded_as_an_error_on_the_abandoned_turn(
    memory: NeotomaMemory,
) -> None:
    script = Script(memory, tool="lookup")
    agent = agent_for(memory, script)
    turns: list[Turn] = []

    @agent.tool_plain
    def lookup() -> str:
        turn = current_turn()
        assert turn is not None
        turns.append(turn)
        raise Boom("tool down")

    with pytest.raises(Boom):
        await agent.run("Look it up")
    [call] = turns[0].result.tools
    assert (call.name, call.status, call.error_class) == ("lookup", "error", f"{__name__}.Boom")
    assert turns[0].result.status.value == "abandoned"


async def test_a_tool_cancelled_with_its_run_is_recorded_cancelled(memory: NeotomaMemory) -> None:
    script = Script(memory, tool="wait")
    agent = agent_for(memory, script)
    turns: list[Turn] = []
    started = asyncio.Event()

    @agent.tool_plain
    async def wait() -> str:
        turn = current_turn()
        assert turn is not None
        turns.append(turn)
        started.set()
        await asyncio.Event().wait()
        return "never"

    task = asyncio.ensure_future(agent.run("Wait for it"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [call] = turns[0].result.tools
    assert (call.name, call.status, call.call_id) == ("wait", "cancelled", "call-1")
    assert call.error_class == "asyncio.exceptions.CancelledError"
    assert await stored(memory) == [("Wait for it", None, "abandoned")]


async def test_a_call_deferred_for_approval_is_recorded_once_when_it_runs(
    memory: NeotomaMemory,
) -> None:
    script = Script(memory, chunks=("Email sent.",), tool="send_email")
    agent = approval_agent(memory, script)
    deferred = await agent.run("Send the email")
    resumed = await agent.run(
        None,
        message_history=deferred.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call-1": True}),
    )
    assert resumed.output == "Email sent."
    [turn] = SENT
    [call] = turn.result.tools
    assert (call.name, call.status, call.call_id, call.result) == (
        "send_email",
        "ok",
        "call-1",
        "sent",
    )


# --- non-text prompts and outputs -----------------------------------------------------------


async def test_a_list_prompt_stores_its_text_parts_and_placeholders(memory: NeotomaMemory) -> None:
    script = Script(memory)
    await agent_for(memory, script).run(
        ["Look at this", ImageUrl(url="https://example.invalid/cat.png"), "and describe it"]
    )
    [(user, _, _)] = await stored(memory)
    assert user == "Look at this\n[image-url]\nand describe it"


class Company(pydantic.BaseModel):
    name: str
    customer: bool


async def test_a_structured_output_is_stored_as_its_json(memory: NeotomaMemory) -> None:
    agent = Agent(
        TestModel(custom_output_args={"name": "Acme Corp", "customer": True}),
        output_type=Company,
        capabilities=[NeotomaCapability(memory, partial_text=False)],
    )
    result = await agent.run("What is Acme Corp?")
    assert result.output == Company(name="Acme Corp", customer=True)
    assert await stored(memory) == [
        ("What is Acme Corp?", '{"name":"Acme Corp","customer":true}', "completed")
    ]


async def test_a_run_with_no_prompt_anywhere_is_not_recorded(memory: NeotomaMemory) -> None:
    from pydantic_ai.messages import ModelRequest, SystemPromptPart

    script = Script(memory)
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart("Be brief.")])]
    await agent_for(memory, script).run(None, message_history=history)
    assert await stored(memory) == []


async def test_partial_text_off_keeps_plain_requests(memory: NeotomaMemory) -> None:
    # A FunctionModel without a stream function works when the partial text is not watched.
    def answer(messages: list[ModelMessage], info: AgentInfo) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart

        return ModelResponse(parts=[TextPart("Plain.")])

    agent = Agent(
        FunctionModel(answer), capabilities=[NeotomaCapability(memory, partial_text=False)]
    )
    assert (await agent.run("Hi")).output == "Plain."
    assert await stored(memory) == [("Hi", "Plain.", "completed")]


async def test_on_turn_end_gets_each_stored_turn(memory: NeotomaMemory) -> None:
    ended: list[Turn] = []
    script = Script(memory)
    agent = agent_for(memory, script, on_turn_end=ended.append)
    await agent.run("What about Acme Corp?")
    with pytest.raises(Boom):
        await agent_for(memory, Script(memory, fail=Boom()), on_turn_end=ended.append).run("Fail")
    assert [t.result.status.value for t in ended] == ["completed", "abandoned"]
    assert ended[0].model == script.model().model_name  # the turn record names the model
    assert ended[0].result.retrieved_ids == ended[0].retrieved_ids != ()


async def test_bad_settings_are_refused(memory: NeotomaMemory) -> None:
    with pytest.raises(TypeError):
        NeotomaCapability("not a memory")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context_chars"):
        NeotomaCapability(memory, context_chars=-1)
