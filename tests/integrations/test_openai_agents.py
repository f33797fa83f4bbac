"""OpenAI Agents SDK: the turn's three rules through ``run`` and ``run_streamed``.

Each entry point × completed / raised / cancelled / no final output, against a real SQLite
store, with the SDK's own ``agents.testing.ScriptedModel``; tracing off, no key, no network.
What a turn stored is read back with ``memory.history()``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the [openai-agents] extra is not installed")

import pydantic
from agents import (
    Agent,
    RunConfig,
    RunHooks,
    function_tool,
    handoff,
    set_tracing_disabled,
)
from agents.exceptions import UserError
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseTextDeltaEvent
from structlog.testing import capture_logs

from neotoma_agent import EmbeddedStore, NeotomaMemory, current_turn
from neotoma_agent.integrations.openai_agents import AgentsStream, run, run_streamed

pytestmark = pytest.mark.anyio

# asyncio.timeout is Python 3.11's; the Agents SDK runs on 3.10 too.
needs_asyncio_timeout = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="asyncio.timeout needs Python >= 3.11"
)
set_tracing_disabled(True)
NO_TRACE = RunConfig(tracing_disabled=True)
NO_REPLY = "neotoma_agent.integrations.NoFinalReply"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK runs on asyncio only


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[NeotomaMemory]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        mem = NeotomaMemory(store, conversation_id="chat-1", platform="tests")
        await mem.remember("company", name="Acme Corp", website="acme.com")
        yield mem


class Boom(RuntimeError):
    """The model fails."""


async def stored(memory: NeotomaMemory) -> list[tuple[str, str | None, str]]:
    return [(h.user, h.reply, h.status) for h in await memory.history(limit=None)]


def abandoned_error_classes(logs: list[dict[str, Any]]) -> list[str]:
    return [e["error_class"] for e in logs if e["event"] == "turn.abandoned"]


def delta(text: str) -> ResponseTextDeltaEvent:
    return ResponseTextDeltaEvent(
        type="response.output_text.delta",
        delta=text,
        item_id="msg-1",
        output_index=0,
        content_index=0,
        sequence_number=1,
        logprobs=[],
    )


class Stalled:
    """A streamed model step that shows ``text``, then blocks (or raises ``fail``)."""

    def __init__(self, text: str, fail: BaseException | None = None) -> None:
        self.text = text
        self.fail = fail
        self.shown = asyncio.Event()

    async def __call__(self, call: Any) -> AsyncIterator[Any]:
        yield delta(self.text)
        self.shown.set()
        if self.fail is not None:
            raise self.fail
        await asyncio.Event().wait()

    def step(self) -> ModelStep:
        return ModelStep.stream(self)


class Watching(ScriptedModel):
    """A ScriptedModel that also records what was stored while it was called (rule 1)."""

    def __init__(self, memory: NeotomaMemory, steps: list[Any]) -> None:
        super().__init__(steps)
        self.memory = memory
        self.stored_at_call: list[list[tuple[str, str]]] = []

    async def _note(self) -> None:
        self.stored_at_call.append(
            [(h.user, h.status) for h in await self.memory.history(limit=None)]
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        await self._note()
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await self._note()
        async for event in super().stream_response(*args, **kwargs):
            yield event


def agent_with(model: ScriptedModel, **kw: Any) -> Agent[Any]:
    return Agent(name="assistant", instructions="You help.", model=model, **kw)


async def streamed_text(
    agent: Agent[Any],
    prompt: Any,
    memory: NeotomaMemory,
    seen: asyncio.Event | None = None,
    **kw: Any,
) -> str:
    """The text the consumer was shown; ``seen`` is set once it has received a piece."""
    shown = ""
    async with run_streamed(agent, prompt, memory=memory, run_config=NO_TRACE, **kw) as stream:
        async for piece in stream.text():
            shown += piece
            if seen is not None:
                seen.set()
    return shown


# --- completed ------------------------------------------------------------------------------


async def test_run_stores_the_user_message_first_and_the_exact_reply_once(
    memory: NeotomaMemory,
) -> None:
    model = Watching(memory, [[assistant_message("Acme is a customer.")]])
    ran = await run(agent_with(model), "What about Acme Corp?", memory=memory, run_config=NO_TRACE)
    assert ran.final_output == "Acme is a customer."
    assert model.stored_at_call == [[("What about Acme Corp?", "open")]]
    assert await stored(memory) == [("What about Acme Corp?", "Acme is a customer.", "completed")]
    assert ran.turn.result.completed


async def test_run_streamed_stores_the_exact_reply_once(memory: NeotomaMemory) -> None:
    model = Watching(memory, [[assistant_message("Acme is a customer.")]])
    shown = await streamed_text(agent_with(model), "What about Acme Corp?", memory)
    assert shown == "Acme is a customer."
    assert model.stored_at_call == [[("What about Acme Corp?", "open")]]
    assert await stored(memory) == [("What about Acme Corp?", "Acme is a customer.", "completed")]


async def test_a_stream_nobody_reads_is_drained_and_stored(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("Unread reply.")]])
    async with run_streamed(agent_with(model), "Hi", memory=memory, run_config=NO_TRACE) as s:
        pass
    assert s.result.final_output == "Unread reply."
    assert await stored(memory) == [("Hi", "Unread reply.", "completed")]


async def test_the_raw_events_are_given_and_feed_the_partial(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("Evented.")]])
    kinds = []
    async with run_streamed(agent_with(model), "Hi", memory=memory, run_config=NO_TRACE) as s:
        async for event in s.events():
            kinds.append(event.type)
        assert s.turn.reply == "Evented."
    assert "raw_response_event" in kinds
    assert "run_item_stream_event" in kinds


# --- raised ---------------------------------------------------------------------------------


async def test_a_model_error_in_run_abandons_the_turn_and_propagates(memory: NeotomaMemory) -> None:
    error = Boom("model down")
    model = ScriptedModel([ModelStep.raise_error(error)])
    with capture_logs() as logs, pytest.raises(Boom) as caught:
        await run(agent_with(model), "Error turn", memory=memory, run_config=NO_TRACE)
    assert caught.value is error
    assert await stored(memory) == [("Error turn", None, "abandoned")]
    assert abandoned_error_classes(logs) == [f"{__name__}.Boom"]


async def test_a_model_error_mid_stream_keeps_the_partial_and_propagates(
    memory: NeotomaMemory,
) -> None:
    error = Boom("stream broke")
    model = ScriptedModel([Stalled("half ", fail=error).step()])
    with pytest.raises(Boom) as caught:
        await streamed_text(agent_with(model), "Error turn", memory)
    assert caught.value is error
    assert await stored(memory) == [("Error turn", "half ", "abandoned")]


async def test_an_error_in_the_callers_block_abandons_and_propagates(memory: NeotomaMemory) -> None:
    model = ScriptedModel([Stalled("shown ").step()])
    error = Boom("the caller's own")
    caught = None
    try:
        async with run_streamed(
            agent_with(model), "Body error", memory=memory, run_config=NO_TRACE
        ) as s:
            async for _ in s.text():
                raise error
    except Boom as exc:
        caught = exc
    assert caught is error
    assert await stored(memory) == [("Body error", "shown ", "abandoned")]


async def test_a_tool_error_that_escapes_abandons_the_turn(memory: NeotomaMemory) -> None:
    @function_tool(failure_error_function=None)
    def lookup() -> str:
        raise Boom("tool down")

    model = ScriptedModel([[function_call("lookup", {}, call_id="c1")]])
    with pytest.raises(UserError):  # the SDK's wrapper around the tool's own error
        await run(agent_with(model, tools=[lookup]), "Look", memory=memory, run_config=NO_TRACE)
    assert await stored(memory) == [("Look", None, "abandoned")]


async def test_an_output_validation_failure_abandons_the_turn(memory: NeotomaMemory) -> None:
    from agents import ModelBehaviorError

    model = ScriptedModel([[assistant_message("not json")]])
    with pytest.raises(ModelBehaviorError):
        await run(
            agent_with(model, output_type=Company),
            "Acme?",
            memory=memory,
            run_config=NO_TRACE,
        )
    assert await stored(memory) == [("Acme?", None, "abandoned")]


async def test_a_tripped_output_guardrail_never_stores_the_reply(memory: NeotomaMemory) -> None:
    from agents import GuardrailFunctionOutput, OutputGuardrailTripwireTriggered, output_guardrail

    @output_guardrail
    async def no_secrets(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="secret" in output)

    model = ScriptedModel([[assistant_message("The secret is 42.")]])
    agent = agent_with(model, output_guardrails=[no_secrets])
    with pytest.raises(OutputGuardrailTripwireTriggered):
        await run(agent, "Tell me", memory=memory, run_config=NO_TRACE)
    assert await stored(memory) == [("Tell me", None, "abandoned")]


# --- cancelled ------------------------------------------------------------------------------


async def test_cancelling_the_task_of_run_abandons_the_turn(memory: NeotomaMemory) -> None:
    called = asyncio.Event()

    async def hang(call: Any) -> Any:
        called.set()
        await asyncio.Event().wait()

    model = ScriptedModel([ModelStep.respond(hang)])
    task = asyncio.ensure_future(
        run(agent_with(model), "Cancel run", memory=memory, run_config=NO_TRACE)
    )
    await called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(memory) == [("Cancel run", None, "abandoned")]


@needs_asyncio_timeout
async def test_an_asyncio_timeout_around_run_abandons_and_raises_timeout_error(
    memory: NeotomaMemory,
) -> None:
    called = asyncio.Event()

    async def hang(call: Any) -> Any:
        called.set()
        await asyncio.Event().wait()

    model = ScriptedModel([ModelStep.respond(hang)])

    async def attempt() -> None:
        async with asyncio.timeout(None) as deadline:

            async def expire_once_called() -> None:
                await called.wait()
                deadline.reschedule(asyncio.get_running_loop().time())

            expiry = asyncio.ensure_future(expire_once_called())
            await run(agent_with(model), "Timeout run", memory=memory, run_config=NO_TRACE)
        await expiry

    with pytest.raises(TimeoutError):
        await attempt()
    assert await stored(memory) == [("Timeout run", None, "abandoned")]


async def test_cancelling_the_consumer_task_abandons_with_what_was_shown(
    memory: NeotomaMemory,
) -> None:
    stall = Stalled("partial shown")
    model = ScriptedModel([stall.step()])
    seen = asyncio.Event()
    task = asyncio.ensure_future(streamed_text(agent_with(model), "Task cancel", memory, seen))
    await seen.wait()  # the delta reached the consumer
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(memory) == [("Task cancel", "partial shown", "abandoned")]


@needs_asyncio_timeout
async def test_an_asyncio_timeout_abandons_and_raises_timeout_error(memory: NeotomaMemory) -> None:
    stall = Stalled("partial shown")
    model = ScriptedModel([stall.step()])
    seen = asyncio.Event()

    async def attempt() -> None:
        async with asyncio.timeout(None) as deadline:

            async def expire_once_shown() -> None:
                await seen.wait()  # the delta reached the consumer
                deadline.reschedule(asyncio.get_running_loop().time())

            expiry = asyncio.ensure_future(expire_once_shown())
            await streamed_text(agent_with(model), "Timeout turn", memory, seen)
        await expiry

    with pytest.raises(TimeoutError):
        await attempt()
    assert await stored(memory) == [("Timeout turn", "partial shown", "abandoned")]


async def test_the_sdks_own_cancel_abandons_with_what_was_shown(memory: NeotomaMemory) -> None:
    model = ScriptedModel([Stalled("partial shown").step()])
    with capture_logs() as logs:
        async with run_streamed(
            agent_with(model), "Stop button", memory=memory, run_config=NO_TRACE
        ) as s:
            async for _ in s.text():
                s.cancel()
    assert s.result.final_output is None
    assert await stored(memory) == [("Stop button", "partial shown", "abandoned")]
    assert abandoned_error_classes(logs) == [NO_REPLY]


async def test_cancel_after_turn_stores_the_final_output_the_turn_gave(
    memory: NeotomaMemory,
) -> None:
    model = ScriptedModel([[assistant_message("The whole reply.")]])
    async with run_streamed(agent_with(model), "Finish", memory=memory, run_config=NO_TRACE) as s:
        async for _ in s.text():
            s.cancel("after_turn")
    assert s.result.final_output == "The whole reply."
    assert await stored(memory) == [("Finish", "The whole reply.", "completed")]


async def test_cancel_after_a_tool_turn_leaves_no_final_output_and_abandons(
    memory: NeotomaMemory,
) -> None:
    @function_tool
    def lookup() -> str:
        return "found"

    model = ScriptedModel(
        [[function_call("lookup", {}, call_id="c1")], [assistant_message("Never asked.")]]
    )
    agent = agent_with(model, tools=[lookup])
    with capture_logs() as logs:
        async with run_streamed(agent, "Stop after", memory=memory, run_config=NO_TRACE) as s:
            async for _ in s.events():
                s.cancel("after_turn")
    assert s.result.final_output is None
    assert [(c.name, c.status) for c in s.turn.result.tools] == [("lookup", "ok")]
    assert await stored(memory) == [("Stop after", None, "abandoned")]
    assert abandoned_error_classes(logs) == [NO_REPLY]


async def test_leaving_the_text_loop_early_still_stores_the_finished_run(
    memory: NeotomaMemory,
) -> None:
    model = ScriptedModel([[assistant_message("The whole reply.")]])
    async with run_streamed(agent_with(model), "Peek", memory=memory, run_config=NO_TRACE) as s:
        async for _ in s.text():
            break
    assert await stored(memory) == [("Peek", "The whole reply.", "completed")]


# --- no final output ------------------------------------------------------------------------


async def test_a_run_waiting_for_approval_is_abandoned_and_returned(memory: NeotomaMemory) -> None:
    @function_tool(needs_approval=True)
    def send_email() -> str:
        return "sent"

    model = ScriptedModel(
        [[function_call("send_email", {}, call_id="c1")], [assistant_message("Email sent.")]]
    )
    agent = agent_with(model, tools=[send_email])
    with capture_logs() as logs:
        ran = await run(agent, "Send the email", memory=memory, run_config=NO_TRACE)
    assert ran.result.interruptions
    assert await stored(memory) == [("Send the email", None, "abandoned")]
    assert abandoned_error_classes(logs) == [NO_REPLY]

    state = ran.result.to_state()
    for item in ran.result.interruptions:
        state.approve(item)
    resumed = await run(agent, state, memory=memory, turn_id=ran.turn.turn_id, run_config=NO_TRACE)
    assert resumed.final_output == "Email sent."
    assert await stored(memory) == [("Send the email", "Email sent.", "completed")]


async def test_a_streamed_run_waiting_for_approval_is_abandoned(memory: NeotomaMemory) -> None:
    @function_tool(needs_approval=True)
    def send_email() -> str:
        return "sent"

    model = ScriptedModel([[function_call("send_email", {}, call_id="c1")]])
    agent = agent_with(model, tools=[send_email])
    with capture_logs() as logs:
        async with run_streamed(agent, "Send it", memory=memory, run_config=NO_TRACE) as s:
            async for _ in s.text():
                pass
    assert s.result.interruptions
    assert s.turn.result.stored_status == "abandoned"
    assert await stored(memory) == [("Send it", None, "abandoned")]
    assert abandoned_error_classes(logs) == [NO_REPLY]


async def test_max_turns_is_an_error_not_a_reply(memory: NeotomaMemory) -> None:
    from agents.exceptions import MaxTurnsExceeded

    @function_tool
    def again() -> str:
        return "more"

    model = ScriptedModel([[function_call("again", {}, call_id=f"c{i}")] for i in range(3)])
    with pytest.raises(MaxTurnsExceeded):
        await run(
            agent_with(model, tools=[again]),
            "Loop",
            memory=memory,
            run_config=NO_TRACE,
            max_turns=2,
        )
    assert await stored(memory) == [("Loop", None, "abandoned")]


# --- what the model is given ----------------------------------------------------------------


async def test_the_context_is_appended_to_the_instructions(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("ok")]])
    await run(agent_with(model), "What about Acme Corp?", memory=memory, run_config=NO_TRACE)
    instructions = model.calls[0].system_instructions
    assert instructions is not None
    assert instructions.startswith("You help.\n\nKnown entities")
    assert 'company "Acme Corp"' in instructions


async def test_the_callers_filter_and_config_are_kept(memory: NeotomaMemory) -> None:
    seen: list[str | None] = []

    def own_filter(data: CallModelData[Any]) -> ModelInputData:
        seen.append(data.model_data.instructions)
        return ModelInputData(input=data.model_data.input, instructions="Caller's rules.")

    model = ScriptedModel([[assistant_message("ok")]])
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=own_filter, workflow_name="wf"
    )
    await run(agent_with(model), "What about Acme Corp?", memory=memory, run_config=config)
    assert seen == ["You help."]
    instructions = model.calls[0].system_instructions
    assert instructions is not None
    assert instructions.startswith("Caller's rules.\n\nKnown entities")
    assert config.call_model_input_filter is own_filter  # the caller's config is not changed


async def test_the_context_can_be_turned_off(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("ok")]])
    await run(
        agent_with(model),
        "What about Acme Corp?",
        memory=memory,
        run_config=NO_TRACE,
        context=False,
    )
    assert model.calls[0].system_instructions == "You help."


async def test_the_context_keeps_to_its_budget(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("ok")]])
    await run(
        agent_with(model),
        "What about Acme Corp?",
        memory=memory,
        run_config=NO_TRACE,
        context_chars=60,
    )
    instructions = model.calls[0].system_instructions
    assert instructions is not None
    assert instructions.startswith("You help.\n\n")
    block = instructions.removeprefix("You help.\n\n")
    assert block
    assert len(block) <= 60


async def test_a_session_carries_the_history_so_it_is_not_sent_again(
    memory: NeotomaMemory,
) -> None:
    from agents import SQLiteSession

    session = SQLiteSession("chat-1")  # in memory
    model = ScriptedModel([[assistant_message("First.")], [assistant_message("Second.")]])
    agent = agent_with(model)
    await run(agent, "Hello", memory=memory, run_config=NO_TRACE, session=session)
    await run(agent, "Again", memory=memory, run_config=NO_TRACE, session=session)
    sent = [item for item in model.calls[1].input if item.get("role") == "user"]
    assert [item["content"] for item in sent] == ["Hello", "Again"]  # each once: the session's
    assert await stored(memory) == [
        ("Hello", "First.", "completed"),
        ("Again", "Second.", "completed"),
    ]


async def test_history_is_sent_once_and_not_when_the_caller_carries_it(
    memory: NeotomaMemory,
) -> None:
    model = ScriptedModel([[assistant_message("First.")], [assistant_message("Second.")]])
    agent = agent_with(model)
    first = await run(agent, "Hello", memory=memory, run_config=NO_TRACE)
    await run(agent, "Again", memory=memory, run_config=NO_TRACE)
    assert model.calls[1].input == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "First."},
        {"role": "user", "content": "Again"},
    ]
    # The caller's own list: sent as it is, its last user message recorded.
    model.enqueue([assistant_message("Third.")])
    items = [*first.result.to_input_list(), {"role": "user", "content": "Third time"}]
    await run(agent, items, memory=memory, run_config=NO_TRACE)
    assert model.calls[2].input == items
    assert (await stored(memory))[-1] == ("Third time", "Third.", "completed")


# --- tools and handoffs ---------------------------------------------------------------------


async def test_a_tool_reaches_the_turn_its_call_is_recorded_and_the_callers_hooks_run(
    memory: NeotomaMemory,
) -> None:
    @function_tool
    def book(party: int) -> str:
        turn = current_turn()
        assert turn is not None
        return turn.remember("booking", name="Table", party=party)

    class Hooks(RunHooks[Any]):
        def __init__(self) -> None:
            self.ended: list[str] = []

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            self.ended.append(tool.name)

    hooks = Hooks()
    model = ScriptedModel(
        [[function_call("book", {"party": 2}, call_id="c1")], [assistant_message("Booked.")]]
    )
    ran = await run(
        agent_with(model, tools=[book]), "Book it", memory=memory, run_config=NO_TRACE, hooks=hooks
    )
    assert hooks.ended == ["book"]
    [h] = await memory.history(limit=None)
    assert (h.reply, h.status, len(h.reply_refers_to)) == ("Booked.", "completed", 1)
    [call] = ran.turn.result.tools
    assert (call.name, call.status, call.call_id, call.args) == ("book", "ok", "c1", {"party": 2})
    assert call.result == h.reply_refers_to[0]


async def test_a_tool_cites_an_entity_through_the_current_turn(memory: NeotomaMemory) -> None:
    beta = await memory.remember("company", name="Beta Ltd")

    @function_tool
    def find() -> str:
        turn = current_turn()
        assert turn is not None
        turn.cite(beta)
        return beta

    model = ScriptedModel(
        [[function_call("find", {}, call_id="c1")], [assistant_message("Found it.")]]
    )
    await run(agent_with(model, tools=[find]), "Find it", memory=memory, run_config=NO_TRACE)
    [h] = await memory.history(limit=None)
    assert (h.reply, h.status) == ("Found it.", "completed")
    assert beta in h.reply_refers_to


async def test_a_streamed_runs_tool_call_is_recorded(memory: NeotomaMemory) -> None:
    @function_tool
    def lookup(name: str) -> str:
        return "a customer"

    model = ScriptedModel(
        [[function_call("lookup", {"name": "Acme"}, call_id="c9")], [assistant_message("Yes.")]]
    )
    async with run_streamed(
        agent_with(model, tools=[lookup]), "Acme?", memory=memory, run_config=NO_TRACE
    ) as s:
        pass
    [call] = s.turn.result.tools
    assert (call.name, call.status, call.result) == ("lookup", "ok", "a customer")


async def test_a_tool_that_fails_the_run_is_recorded_as_an_error(memory: NeotomaMemory) -> None:
    @function_tool(failure_error_function=None)
    def lookup() -> str:
        raise Boom("tool down")

    model = ScriptedModel([[function_call("lookup", {}, call_id="c1")]])
    turns: list[Any] = []

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            turns.append(current_turn())

    with pytest.raises(UserError):
        await run(
            agent_with(model, tools=[lookup]),
            "Look",
            memory=memory,
            run_config=NO_TRACE,
            hooks=Hooks(),
        )
    [call] = turns[0].result.tools
    assert (call.name, call.status, call.call_id) == ("lookup", "error", "c1")
    assert call.error_class == "agents.exceptions.UserError"


async def test_a_tool_cancelled_with_its_run_is_recorded_cancelled(memory: NeotomaMemory) -> None:
    started = asyncio.Event()

    @function_tool
    async def wait() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    turns: list[Any] = []

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            turns.append(current_turn())

    model = ScriptedModel([[function_call("wait", {}, call_id="c1")]])
    task = asyncio.ensure_future(
        run(
            agent_with(model, tools=[wait]),
            "Wait",
            memory=memory,
            run_config=NO_TRACE,
            hooks=Hooks(),
        )
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [call] = turns[0].result.tools
    assert (call.name, call.status, call.call_id) == ("wait", "cancelled", "c1")
    assert await stored(memory) == [("Wait", None, "abandoned")]


async def test_a_handoff_stays_one_turn(memory: NeotomaMemory) -> None:
    billing_model = ScriptedModel([[assistant_message("Billing here: paid.")]])
    billing = Agent(name="billing", instructions="Billing.", model=billing_model)
    triage_model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]])
    triage = agent_with(triage_model, handoffs=[handoff(billing)])
    ran = await run(triage, "Has Acme Corp paid invoice 7?", memory=memory, run_config=NO_TRACE)
    assert ran.final_output == "Billing here: paid."
    assert await stored(memory) == [
        ("Has Acme Corp paid invoice 7?", "Billing here: paid.", "completed")
    ]
    # The agent handed to gets the same context block.
    assert billing_model.calls[0].system_instructions is not None
    assert "Known entities" in billing_model.calls[0].system_instructions
    # What is recorded of the handoff: a call named after it, from one agent to the other.
    [call] = ran.turn.result.tools
    assert (call.name, call.args) == ("transfer_to_billing", {"from": "assistant", "to": "billing"})


# --- non-text inputs and outputs ------------------------------------------------------------


async def test_a_list_input_records_its_last_user_messages_text(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message("A cat.")]])
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {
                    "type": "input_image",
                    "image_url": "https://example.invalid/cat.png",
                    "detail": "auto",
                },
            ],
        }
    ]
    await run(agent_with(model), items, memory=memory, run_config=NO_TRACE)
    assert await stored(memory) == [("What is this?\n[input_image]", "A cat.", "completed")]


class Company(pydantic.BaseModel):
    name: str
    customer: bool


async def test_a_structured_output_is_stored_as_its_json(memory: NeotomaMemory) -> None:
    model = ScriptedModel([[assistant_message('{"name": "Acme Corp", "customer": true}')]])
    ran = await run(
        agent_with(model, output_type=Company), "Acme?", memory=memory, run_config=NO_TRACE
    )
    assert ran.final_output == Company(name="Acme Corp", customer=True)
    assert await stored(memory) == [("Acme?", '{"name":"Acme Corp","customer":true}', "completed")]


async def test_bad_arguments_are_refused_before_any_io(memory: NeotomaMemory) -> None:
    model = ScriptedModel([])
    with pytest.raises(ValueError, match="no user message"):
        await run(agent_with(model), [{"role": "assistant", "content": "hi"}], memory=memory)
    with pytest.raises(TypeError, match="memory"):
        await run(agent_with(model), "hi", memory="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context_chars"):
        run_streamed(agent_with(model), "hi", memory=memory, context_chars=-1)
    assert await stored(memory) == []


def test_the_stream_type_is_exported() -> None:
    assert AgentsStream.__name__ == "AgentsStream"


def test_the_turn_record_names_the_model_a_string_names() -> None:
    from neotoma_agent.integrations.openai_agents import _model_name

    scripted = agent_with(ScriptedModel([]))
    assert _model_name(scripted, None) is None  # a Model object with no name to read
    named = Agent(name="a", model="gpt-x")
    assert _model_name(named, None) == "gpt-x"
    assert _model_name(named, RunConfig(model="gpt-y")) == "gpt-y"  # the RunConfig's wins
    assert _model_name(scripted, {"model": "gpt-z"}) == "gpt-z"
