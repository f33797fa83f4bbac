"""The Claude Agent SDK: the three rules of a turn on nc.turn (a client) and nc.query.

The SDK's real ``ClaudeSDKClient`` and ``query()`` over its public ``Transport`` seam, with a
scripted fake CLI (``claude_support.FakeCLI``); a real EmbeddedStore file, read back. On
asyncio and trio, as the SDK runs on both.
"""

# The client's block and the turn's are kept apart on purpose: the turn runs inside a client
# connected before it, as an application's does.
# ruff: noqa: SIM117

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("claude_agent_sdk", reason="the [claude-agent-sdk] extra is not installed")

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, HookMatcher, ResultMessage
from claude_support import SESSION, FakeCLI, success
from turn_support import seed, turn_record

from neotoma_agent import EmbeddedStore, NeotomaMemory, TurnState, current_turn
from neotoma_agent.integrations.claude_agent_sdk import ClaudeTurn, NeotomaClaude

pytestmark = [
    pytest.mark.anyio,
    # The SDK's own receive_response() / receive_messages() nest async generators that it
    # leaves to the garbage collector once a ResultMessage ends them; trio warns about that
    # for any caller (not something this integration can close: the inner ones are private).
    pytest.mark.filterwarnings("ignore:Async generator 'claude_agent_sdk.:ResourceWarning"),
]

PROMPT_HOOK = ("hook", "UserPromptSubmit", {"prompt": "What about Acme Corp?", "prompt_id": "p-1"})


@pytest.fixture
async def store(tmp_path: Path, anyio_backend: str) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "memory.db") as embedded:
        yield embedded


@pytest.fixture
def memory(store: EmbeddedStore) -> NeotomaMemory:
    return NeotomaMemory(store, conversation_id="chat-1", platform="tests", close_timeout=5.0)


async def stored(memory: NeotomaMemory) -> list[tuple[str, str | None, str | None]]:
    return [(h.status, h.user, h.reply) for h in await memory.history(limit=None)]


async def error_class(store: EmbeddedStore, turn_id: str) -> str:
    record = await turn_record(store, "chat-1", turn_id)
    observations = (await store.list_observations(record["id"])).observations
    return next(str(o.fields["error_class"]) for o in observations if "error_class" in o.fields)


def client_for(nc: NeotomaClaude, cli: FakeCLI) -> ClaudeSDKClient:
    return ClaudeSDKClient(ClaudeAgentOptions(hooks=nc.hooks()), transport=cli)  # type: ignore[arg-type]


class Died(Exception):
    """The command line's own failure (its output broke off)."""


ENTRIES = ["turn", "query"]


@contextlib.asynccontextmanager
async def entered(
    nc: NeotomaClaude, entry: str, cli: FakeCLI, prompt: str, **kw: Any
) -> AsyncIterator[ClaudeTurn]:
    """``nc.turn`` on a client over ``cli``, or ``nc.query`` over it: the same block."""
    if entry == "turn":
        async with client_for(nc, cli) as client:
            async with nc.turn(client, prompt, **kw) as s:
                yield s
    else:
        options = ClaudeAgentOptions(hooks=nc.hooks(), include_partial_messages=True)  # type: ignore[arg-type]
        async with nc.query(prompt, options, transport=cli, **kw) as s:
            yield s


# ------------------------------------------------------------------ completed


async def test_a_successful_result_stores_the_reply_once(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    await seed(store, "Acme Corp")
    nc = NeotomaClaude(memory)
    script = [
        PROMPT_HOOK,
        ("delta", "Acme is "),
        ("delta", "a customer."),
        ("assistant", "Acme is a customer."),
        success("Acme is a customer."),
    ]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "What about Acme Corp?") as s:
            deltas = [d async for d in s.text()]
    assert deltas == ["Acme is ", "a customer."]
    assert s.reply == "Acme is a customer."
    assert s.result.status is TurnState.COMPLETED
    assert isinstance(s.result_message, ResultMessage)
    assert await stored(memory) == [("completed", "What about Acme Corp?", "Acme is a customer.")]
    [(event, answer)] = cli.hook_answers
    assert event == "UserPromptSubmit"
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert 'company "Acme Corp"' in context


@pytest.mark.parametrize("entry", ENTRIES)
async def test_the_user_message_is_stored_before_the_prompt_is_sent(
    memory: NeotomaMemory, entry: str
) -> None:
    nc = NeotomaClaude(memory)
    seen: list[Any] = []

    async def look() -> None:
        seen.extend(await stored(memory))

    async with FakeCLI([("call", look), success("ok")]) as cli:
        async with entered(nc, entry, cli, "first things first"):
            pass
    assert seen == [("open", "first things first", None)]


async def test_without_partial_messages_the_assistant_text_is_the_stream(
    memory: NeotomaMemory,
) -> None:
    nc = NeotomaClaude(memory)
    script = [("assistant", "Whole answer."), success("Whole answer.")]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "hi") as s:
            deltas = [d async for d in s.text()]
    assert deltas == ["Whole answer."]
    assert s.result.completed


async def test_two_prompts_on_one_client_are_two_turns(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    first = [("hook", "UserPromptSubmit", {"prompt": "one"}), success("1")]
    second = [("hook", "UserPromptSubmit", {"prompt": "two"}), success("2")]
    async with FakeCLI(first, second) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "one"):
            pass
        async with nc.turn(client, "two"):
            pass
    assert await stored(memory) == [("completed", "one", "1"), ("completed", "two", "2")]


async def test_nc_query_runs_one_shot_query_as_a_turn(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    seen_in_hook: list[bool] = []

    async def mine(data: Any, tool_use_id: Any, context: Any) -> Any:
        seen_in_hook.append(current_turn() is not None)
        return {}

    hooks = nc.hooks()
    hooks["UserPromptSubmit"].append(HookMatcher(hooks=[mine]))
    options = ClaudeAgentOptions(hooks=hooks)  # type: ignore[arg-type]
    script = [PROMPT_HOOK, ("delta", "Done."), success("Done.")]
    async with FakeCLI(script) as cli:
        async with nc.query("What about Acme Corp?", options, transport=cli) as s:
            text = "".join([d async for d in s.text()])
    assert text == "Done."
    assert s.reply == "Done."
    assert seen_in_hook == [True]  # the SDK's reader started inside the turn
    assert await stored(memory) == [("completed", "What about Acme Corp?", "Done.")]


async def test_a_prompt_given_as_content_blocks_is_stored_as_its_text(
    memory: NeotomaMemory,
) -> None:
    nc = NeotomaClaude(memory)
    prompt = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
            ],
        },
        "parent_tool_use_id": None,
    }
    async with FakeCLI([success("A cat.")]) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, prompt):
            pass
    assert await stored(memory) == [("completed", "What is this?\n[image]", "A cat.")]
    assert cli.prompts[0][1]["type"] == "image"  # the SDK got the whole message


# ------------------------------------------------------------------ not a success


async def test_an_api_error_result_is_abandoned_and_its_text_never_stored(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    nc = NeotomaClaude(memory)
    error = "API Error: 400 fake refusal"
    script = [("error_assistant", error), ("result", "success", True, error, "api_error")]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "Error turn", turn_id="t1") as s:
            deltas = [d async for d in s.text()]
    assert deltas == []
    assert s.reply is None
    assert s.result.status is TurnState.ABANDONED
    assert s.result_message is not None
    assert s.result_message.is_error
    assert await stored(memory) == [("abandoned", "Error turn", None)]
    assert await error_class(store, "t1") == "neotoma_agent.integrations.NoFinalReply"


async def test_an_interrupt_abandons_with_the_partial(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    script = [("delta", "partial "), ("wait",)]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "Interrupt turn") as s:
            async for _ in s.text():
                await s.interrupt()
    assert cli.interrupts == 1
    assert s.result_message is not None
    assert s.result_message.subtype == "error_during_execution"
    assert await stored(memory) == [("abandoned", "Interrupt turn", "partial ")]


async def test_a_stream_that_ends_without_a_result_is_abandoned(
    memory: NeotomaMemory, anyio_backend: str
) -> None:
    nc = NeotomaClaude(memory)
    async with FakeCLI([("delta", "half "), ("end",)]) as cli:
        async with nc.query("No result", ClaudeAgentOptions(), transport=cli) as s:
            pass
    assert s.result.status is TurnState.ABANDONED
    # Under trio the SDK's query() drops messages still queued when the CLI's output ends
    # without a result (seen with query() alone), so only asyncio sees the partial.
    partial = "half " if anyio_backend == "asyncio" else s.turn.reply or None
    assert await stored(memory) == [("abandoned", "No result", partial)]


async def test_a_cancelled_reader_abandons_with_the_partial(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    async with FakeCLI([("delta", "shown "), ("wait",)]) as cli, client_for(nc, cli) as client:
        with anyio.CancelScope() as scope:
            async with nc.turn(client, "Cancel turn") as s:
                async for _ in s.text():
                    scope.cancel()
        assert scope.cancelled_caught
    assert await stored(memory) == [("abandoned", "Cancel turn", "shown ")]


async def test_a_deadline_abandons_with_the_partial(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    async with FakeCLI([("delta", "shown "), ("wait",)]) as cli, client_for(nc, cli) as client:
        with anyio.move_on_after(1.0):
            async with nc.turn(client, "Deadline turn") as s:
                async for _ in s.text():
                    pass
    assert s.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Deadline turn", "shown ")]


async def test_asyncio_timeout_abandons_and_raises_timeout_error(
    memory: NeotomaMemory, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("asyncio.timeout is asyncio's own way to cancel")
    if sys.version_info < (3, 11):  # the SDK runs on 3.10 too
        pytest.skip("asyncio.timeout needs Python >= 3.11")
    nc = NeotomaClaude(memory)
    async with FakeCLI([("delta", "shown "), ("wait",)]) as cli, client_for(nc, cli) as client:
        with pytest.raises(TimeoutError):  # noqa: PT012
            async with asyncio.timeout(1.0), nc.turn(client, "Timeout turn") as s:
                async for _ in s.text():
                    pass
    assert s.result.status is TurnState.ABANDONED
    assert await stored(memory) == [("abandoned", "Timeout turn", "shown ")]


async def test_leaving_the_text_early_interrupts_and_abandons(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    nc = NeotomaClaude(memory)
    first = [("delta", "one "), ("delta", "two "), ("wait",)]
    async with FakeCLI(first, [success("next")]) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "Stop early", turn_id="t1") as s:
            async for _ in s.text():
                break
        async with nc.turn(client, "Then another") as after:
            pass
    assert cli.interrupts == 1
    assert s.result.status is TurnState.ABANDONED
    assert await error_class(store, "t1") == "neotoma_agent.StoppedEarly"
    assert after.reply == "next"  # the client's next prompt starts clean


async def test_a_caller_error_propagates_unchanged(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    error = KeyError("caller")
    async with FakeCLI([success("never")]) as cli, client_for(nc, cli) as client:
        with pytest.raises(KeyError) as caught:
            async with nc.turn(client, "Caller fails"):
                raise error
    assert caught.value is error
    assert await stored(memory) == [("abandoned", "Caller fails", None)]


@pytest.mark.parametrize("entry", ENTRIES)
async def test_each_entry_point_keeps_the_rules_on_every_ending(
    store: EmbeddedStore, memory: NeotomaMemory, entry: str
) -> None:
    # nc.turn and nc.query alike: a success, an error result, a stream without a result, a
    # cancel, a reader that leaves early (the partial kept, nothing raised that is not the
    # caller's), then the transport failing (its exception propagates unchanged).
    nc = NeotomaClaude(memory)
    api_error = "API Error: 529 overloaded"
    async with FakeCLI([("delta", "All "), ("delta", "good."), success("All good.")]) as cli:
        async with entered(nc, entry, cli, "Fine", turn_id="ok") as s:
            assert "".join([d async for d in s.text()]) == "All good."
    assert s.reply == "All good."
    errored = [("delta", "half "), ("error_assistant", api_error)]
    errored.append(("result", "error_during_execution", True, api_error, "api_error"))
    async with FakeCLI(errored) as cli:
        async with entered(nc, entry, cli, "Errored", turn_id="err") as s:
            pass
    assert s.reply is None
    async with FakeCLI([("delta", "cut "), ("end",)]) as cli:
        async with entered(nc, entry, cli, "No result", turn_id="end") as s:
            async for _ in s.text():
                pass
    async with FakeCLI([("delta", "shown "), ("wait",)]) as cli:
        with anyio.CancelScope() as scope:
            async with entered(nc, entry, cli, "Cancelled", turn_id="cancel") as s:
                async for _ in s.text():
                    scope.cancel()
    assert scope.cancelled_caught
    async with FakeCLI([("delta", "one "), ("delta", "two "), ("wait",)]) as cli:
        async with entered(nc, entry, cli, "Left", turn_id="left") as s:
            async for _ in s.text():
                break
    died = Died("the program's output broke off")
    async with FakeCLI([("delta", "before "), ("raise", died)]) as cli:
        with pytest.raises(Died) as caught:  # noqa: PT012
            async with entered(nc, entry, cli, "Died", turn_id="died") as s:
                async for _ in s.text():
                    pass
    assert caught.value is died
    assert await stored(memory) == [
        ("completed", "Fine", "All good."),
        ("abandoned", "Errored", "half "),
        ("abandoned", "No result", "cut "),
        ("abandoned", "Cancelled", "shown "),
        ("abandoned", "Left", "one "),
        ("abandoned", "Died", "before "),
    ]
    for turn_id in ("err", "end"):
        assert await error_class(store, turn_id) == "neotoma_agent.integrations.NoFinalReply"
    assert await error_class(store, "left") == "neotoma_agent.StoppedEarly"
    assert (await error_class(store, "died")).endswith("Died")


@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_structured_output_is_stored_as_its_json(memory: NeotomaMemory, entry: str) -> None:
    nc = NeotomaClaude(memory)
    answer = {"name": "Acme Corp", "customer": True}
    script = [("delta", "{...}"), ("result", "success", False, None, "completed", answer)]
    async with FakeCLI(script) as cli:
        async with entered(nc, entry, cli, "Who?") as s:
            pass
    assert s.reply is not None
    assert json.loads(s.reply) == answer
    assert await stored(memory) == [("completed", "Who?", s.reply)]


# ------------------------------------------------------------------ hooks


async def test_tool_hooks_record_the_calls_in_the_turn(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    nc = NeotomaClaude(memory)
    ok = {
        "tool_name": "Read",
        "tool_input": {"file_path": "/tmp/a"},
        "tool_response": "contents",
        "tool_use_id": "toolu_01",
        "duration_ms": 12,
    }
    failed = {
        "tool_name": "Bash",
        "tool_input": {"command": "false"},
        "error": "exit 1",
        "is_interrupt": False,
        "tool_use_id": "toolu_02",
    }
    script = [
        ("tool_use", "Read", {"file_path": "/tmp/a"}, "toolu_01"),
        ("hook", "PostToolUse", ok),
        ("hook", "PostToolUseFailure", failed),
        ("delta", "Read it."),
        success("Read it."),
    ]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "Read the file") as s:
            pass
    calls = {c.call_id: c for c in s.result.tools}
    assert (calls["toolu_01"].name, calls["toolu_01"].status) == ("Read", "ok")
    assert calls["toolu_01"].args == {"file_path": "/tmp/a"}
    assert calls["toolu_01"].result == "contents"
    assert calls["toolu_01"].duration_ms == 12
    assert (calls["toolu_02"].name, calls["toolu_02"].status) == ("Bash", "error")
    found = await store.query_entities(entity_type="tool_invocation", limit=10)
    assert sorted(e.snapshot["result_status"] for e in found.entities) == ["error", "ok"]
    assert s.reply == "Read it."


async def test_pre_compact_records_a_context_event(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    nc = NeotomaClaude(memory)
    script = [
        ("hook", "PreCompact", {"trigger": "auto", "custom_instructions": None}),
        success("ok"),
    ]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "Long one") as s:
            pass
    [produced] = s.result.produced_ids
    snapshot = (await store.get_entity_snapshot(produced)).snapshot
    # The declared fields in the snapshot; the rest on the observation (as a real server).
    assert (snapshot["event"], snapshot["turn_key"]) == ("pre_compact", s.result.turn_key)
    assert snapshot["observed_at"]
    [observation] = (await store.list_observations(produced)).observations
    assert (observation.fields["trigger"], observation.fields["session_id"]) == ("auto", SESSION)


async def test_outside_a_turn_the_hooks_add_nothing(memory: NeotomaMemory) -> None:
    nc = NeotomaClaude(memory)
    script = [PROMPT_HOOK, success("plain")]
    async with FakeCLI(script) as cli, client_for(nc, cli) as client:
        await client.query("What about Acme Corp?")
        async for _ in client.receive_response():
            pass
    assert cli.hook_answers == [("UserPromptSubmit", {})]
    assert await stored(memory) == []


async def test_context_off_sends_no_additional_context(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    await seed(store, "Acme Corp")
    nc = NeotomaClaude(memory, context=False)
    async with FakeCLI([PROMPT_HOOK, success("ok")]) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, "What about Acme Corp?"):
            pass
    assert cli.hook_answers == [("UserPromptSubmit", {})]


async def test_the_context_shows_earlier_turns_only_where_the_session_lacks_them(
    store: EmbeddedStore, memory: NeotomaMemory
) -> None:
    # A client's first prompt gets them (its session then holds that block), its later
    # prompts do not; a one-shot query() does, unless it resumes a session. The entities
    # are in every block.
    await seed(store, "Acme Corp")
    async with memory.turn("Before any client") as t:
        t.reply = "Noted."
    nc = NeotomaClaude(memory)

    def script(prompt: str) -> list[tuple[Any, ...]]:
        return [("hook", "UserPromptSubmit", {"prompt": prompt}), success("ok")]

    def blocks(cli: FakeCLI) -> list[str]:
        return [a["hookSpecificOutput"]["additionalContext"] for _, a in cli.hook_answers]

    one, two = "Acme Corp, one", "Acme Corp, two"
    async with FakeCLI(script(one), script(two)) as cli, client_for(nc, cli) as client:
        async with nc.turn(client, one):
            pass
        async with nc.turn(client, two):
            pass
    first, later = blocks(cli)
    assert "user: Before any client" in first
    assert 'company "Acme Corp"' in later
    assert "user:" not in later  # the session holds "one" and the block before it
    shown = []
    for resume in (None, "an-earlier-session"):
        async with FakeCLI(script("Acme Corp, three")) as cli:
            options = ClaudeAgentOptions(hooks=nc.hooks(), resume=resume)  # type: ignore[arg-type]
            async with nc.query("Acme Corp, three", options, transport=cli):
                pass
        shown += blocks(cli)
    assert "user: Acme Corp, two" in shown[0]
    assert 'company "Acme Corp"' in shown[1]
    assert "user:" not in shown[1]


def test_bad_settings_are_refused(memory: NeotomaMemory) -> None:
    with pytest.raises(ValueError, match="context_chars"):
        NeotomaClaude(memory, context_chars=-1)
    with pytest.raises(TypeError, match="NeotomaMemory"):
        NeotomaClaude("memory")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prompt"):
        NeotomaClaude(memory).turn(object(), 42)  # type: ignore[arg-type]
