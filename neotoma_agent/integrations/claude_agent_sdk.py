"""The Claude Agent SDK: every prompt is one Neotoma turn, however it ends.

The SDK's hooks cannot hold a turn: no ``Stop`` hook fires on an interrupt or an API error,
an API error arrives as an assistant message holding the error text, and ``Stop`` can
repeat. So the turn is held around the prompt, and closed on the ``ResultMessage``; the
hooks only bring the turn's context to the model and record what happens inside it::

    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient
    from neotoma_agent.integrations.claude_agent_sdk import NeotomaClaude

    nc = NeotomaClaude(memory)
    options = ClaudeAgentOptions(hooks=nc.hooks(), include_partial_messages=True)
    async with ClaudeSDKClient(options) as client:
        async with nc.turn(client, "What about Acme Corp?") as s:
            async for delta in s.text():
                print(delta, end="")
    print(s.result.stored_status)             # "completed"

The three rules, on :meth:`NeotomaClaude.turn` (a ``ClaudeSDKClient``) and
:meth:`NeotomaClaude.query` (one-shot ``query()``) alike:

1. the user message is stored (the turn ``open``) before the prompt is sent;
2. the reply is ``ResultMessage.result`` (or its ``structured_output`` as JSON), stored once,
   and only when the result says ``subtype == "success"`` and ``is_error`` is false;
3. anything else is stored ``abandoned`` with the text the user was shown: an error result
   (an API error's text is never stored as a reply), an interrupt, a stream that ends
   without a result, an exception or a cancellation (which propagate unchanged), a reader
   that leaves :meth:`ClaudeTurn.text` early. A result that is not a success raises
   nothing: the turn's error class is ``neotoma_agent.integrations.NoFinalReply``, and
   ``s.result_message`` says why.

The hooks (:meth:`NeotomaClaude.hooks`, merged into ``ClaudeAgentOptions.hooks``):
``UserPromptSubmit`` returns ``t.context()`` as ``additionalContext``; ``PostToolUse`` and
``PostToolUseFailure`` record the tool call in the turn (the tool-call API: name, input,
response, status, duration, ``tool_use_id``); ``PreCompact`` records a ``context_event``
entity (in the turn, or on its own outside one). ``Stop`` writes nothing. A hook finds its
turn by ``current_turn()`` when the SDK's reader started inside it (``nc.query``), else by
the hook's ``session_id`` (a client runs one prompt at a time). Outside a turn they do
nothing but ``PreCompact``'s record.

Runs on asyncio and trio (the SDK is anyio-based). Needs
``pip install 'neotoma-agent[claude-agent-sdk]'`` (its wheel bundles the ``claude`` program).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import anyio

from neotoma_agent import (
    NeotomaMemory,
    Turn,
    TurnState,
    current_turn,
    expect_undeclared_fields,
)

from ._common import NoFinalReply, StreamedTurn, content_text, missing_framework, reply_text

try:
    import claude_agent_sdk as sdk
    from claude_agent_sdk import (
        AssistantMessage,
        HookMatcher,
        ResultMessage,
        StreamEvent,
        TextBlock,
        ToolUseBlock,
    )
except ImportError as _missing:
    raise missing_framework(__name__, "the Claude Agent SDK", "claude-agent-sdk") from _missing

__all__ = ["ClaudeTurn", "NeotomaClaude", "NoFinalReply"]

#: The entity type ``PreCompact`` records (as the Neotoma project's own adapter does).
CONTEXT_EVENT_TYPE: Final = "context_event"

_logger = logging.getLogger(__name__)


def _prompt_text(prompt: object) -> str:
    """The stored text of a prompt: a ``str``, or one SDK user-message dict.

    A message's content given as blocks is stored as its text blocks, one per line, other
    blocks as ``[image]``-style placeholders (never their bytes or URLs).
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping):
        message = prompt.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str | list):
            return content_text(content)
    raise TypeError(
        "the prompt must be a str or one user-message dict "
        '({"type": "user", "message": {"role": "user", "content": ...}})'
    )


async def _one(prompt: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield dict(prompt)


class ClaudeTurn(StreamedTurn):
    """One prompt as one turn: ``async with nc.turn(client, prompt) as s:``.

    Read it with :meth:`text` (the reply's text deltas, each appended to the reply before it
    is handed on) or :meth:`messages` (every SDK message, in order). If the caller stops
    reading, the block's exit reads on to the ``ResultMessage``; leaving :meth:`text` or
    :meth:`messages` early stops the prompt (``client.interrupt()``) and abandons the turn
    with the text the reader was shown.
    After the block: :attr:`result_message`, :attr:`reply`, :attr:`result`.

    Deltas are the top-level ``text_delta`` stream events (``include_partial_messages=True``;
    a subagent's text, with a ``parent_tool_use_id``, is not the reply); without partial
    messages, the text blocks of each top-level assistant message. An assistant message
    that carries an API error is not text the reply is made of. After a message that asked
    for tools, the partial reply starts again.
    """

    _LEFT_EARLY = "the reply was left before its result"

    def __init__(
        self,
        owner: NeotomaClaude,
        prompt: str | Mapping[str, Any],
        *,
        client: Any = None,
        options: Any = None,
        transport: Any = None,
        turn_id: str | None,
        session_id: str,
    ) -> None:
        super().__init__()
        self._owner = owner
        self._prompt = prompt
        self._text = _prompt_text(prompt)
        self._client = client
        self._options = options
        self._transport = transport
        self._turn_id = turn_id
        self._session_id = session_id
        self._result_message: ResultMessage | None = None
        self._streamed = False

    # -------------------------------------------------------------- read-only state

    @property
    def result_message(self) -> ResultMessage | None:
        """The SDK's ``ResultMessage`` for this prompt, once it has come."""
        return self._result_message

    # -------------------------------------------------------------- reading

    def messages(self) -> AsyncIterator[Any]:
        """Every SDK message of this prompt, up to and including its ``ResultMessage``."""
        return self._reader(self._items())

    async def interrupt(self) -> None:
        """Stop the prompt (``client.interrupt()``): the turn ends abandoned with the partial."""
        if self._client is None:
            raise RuntimeError("query() cannot be interrupted: leave the block instead")
        await self._client.interrupt()

    def _is_last(self, item: Any) -> bool:
        return isinstance(item, ResultMessage)

    def _take(self, message: Any) -> str | None:
        turn = self.turn
        if isinstance(message, ResultMessage):
            self._result_message = message
            return None
        if isinstance(message, StreamEvent):
            if message.parent_tool_use_id is not None:
                return None
            self._streamed = True
            event = message.event
            delta = event.get("delta") if event.get("type") == "content_block_delta" else None
            if isinstance(delta, Mapping) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str) and text:
                    turn.append(text)
                    return text
            return None
        if isinstance(message, AssistantMessage) and message.parent_tool_use_id is None:
            if message.error is not None:
                return None  # the CLI's stand-in for a failed API call, not model text
            if any(isinstance(block, ToolUseBlock) for block in message.content):
                turn.reply = ""  # text before a tool call is not the reply
                return None
            if self._streamed:
                return None  # its text came as deltas already
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            if text:
                turn.append(text)
            return text or None
        return None

    # -------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ClaudeTurn:
        self._enter_once()
        turn = self._owner.memory.turn(self._text, turn_id=self._turn_id)
        self._turn = turn
        await turn.__aenter__()
        self._owner._active.append(turn)
        try:
            if self._owner._carries_history(self._client, self._options):
                self._owner._carried.add(id(turn))
            prompt = self._prompt if isinstance(self._prompt, str) else _one(self._prompt)
            if self._client is not None:
                await self._client.query(prompt, session_id=self._session_id)
                self._owner._prompted.add(self._client)
                self._source = aiter(self._client.receive_response())
            else:
                self._source = aiter(
                    sdk.query(prompt=prompt, options=self._options, transport=self._transport)
                )
        except BaseException as exc:
            await self._close_turn(exc)
            raise
        return self

    async def _left_early(self) -> None:
        # Stop the prompt and read its end, so the client's next prompt starts clean;
        # bounded, as a program that ignores the interrupt must not hang the caller.
        if self._client is None:
            return  # query()'s process ends when its generator is closed
        try:
            with anyio.fail_after(self._owner.memory.close_timeout):
                await self._client.interrupt()
                await self._drain()
        except Exception as stopped:
            _logger.warning("claude.interrupt_failed reason=%s", type(stopped).__name__)

    async def _drain(self) -> None:
        # The rest of a prompt whose reader left: nothing of it was shown, so none of its
        # text joins the partial reply (the turn keeps what the reader saw); its result is
        # kept, for result_message to say how the prompt ended.
        async for message in self._require_source():
            if isinstance(message, ResultMessage):
                self._result_message = message
                break
        self._done = True

    def _settle(self) -> BaseException | None:
        message = self._result_message
        if message is None:
            return NoFinalReply("the stream ended without a result")
        if message.subtype != "success" or message.is_error:
            return NoFinalReply("the result was not a success")
        if isinstance(message.result, str):
            reply = message.result
        elif message.structured_output is not None:
            reply = reply_text(message.structured_output)
        else:
            reply = self.turn.reply
        self.turn.reply = reply
        self._reply = reply
        return None

    async def _close_turn(self, failure: BaseException | None) -> None:
        try:
            await super()._close_turn(failure)
        finally:
            self._owner._release(self.turn)


@dataclasses.dataclass(eq=False)
class NeotomaClaude:
    """Neotoma memory for the Claude Agent SDK: turns around prompts, and the hooks.

    ``memory``: the :class:`~neotoma_agent.NeotomaMemory` every turn is stored in.
    ``context`` (default on) and ``context_chars`` (default 4000): what the
    ``UserPromptSubmit`` hook returns as ``additionalContext`` (``t.context(max_chars=)``).
    History: ``t.context()`` shows the conversation's earlier turns only where the prompt's
    session does not already carry them: on a client's first prompt (its session then holds
    that block), and on each one-shot ``query()``; not on a client's later prompts, nor in a
    session resumed (``resume=``, ``continue_conversation=True``). ``t.history`` is never
    sent as messages.
    """

    memory: NeotomaMemory
    context: bool = True
    context_chars: int = 4000
    _active: list[Turn] = dataclasses.field(default_factory=list, init=False, repr=False)
    _sessions: dict[str, Turn] = dataclasses.field(default_factory=dict, init=False, repr=False)
    #: ids of the open turns whose session already carries the earlier turns
    _carried: set[int] = dataclasses.field(default_factory=set, init=False, repr=False)
    #: the clients a prompt was sent on: their session holds it, and its context block
    _prompted: weakref.WeakSet[Any] = dataclasses.field(
        default_factory=weakref.WeakSet, init=False, repr=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.memory, NeotomaMemory):
            raise TypeError(f"memory must be a NeotomaMemory, not {type(self.memory).__name__}")
        chars = self.context_chars
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
            raise ValueError("context_chars must be an int >= 0")

    # -------------------------------------------------------------- the turns

    def turn(
        self,
        client: Any,
        prompt: str | Mapping[str, Any],
        *,
        turn_id: str | None = None,
        session_id: str = "default",
    ) -> ClaudeTurn:
        """One prompt on a connected ``ClaudeSDKClient``: ``async with nc.turn(client, p) as s:``.

        Enters the turn (the user message stored), then ``client.query(prompt,
        session_id=)``; :class:`ClaudeTurn` reads ``client.receive_response()``. ``prompt``
        is a ``str`` or one user-message dict (content blocks: see the module docstring).
        ``turn_id``: a stable id makes a retried prompt replay instead of storing twice.
        """
        return ClaudeTurn(self, prompt, client=client, turn_id=turn_id, session_id=session_id)

    def query(
        self,
        prompt: str | Mapping[str, Any],
        options: Any = None,
        *,
        transport: Any = None,
        turn_id: str | None = None,
    ) -> ClaudeTurn:
        """One-shot ``claude_agent_sdk.query()`` as one turn: ``async with nc.query(p, o) as s:``.

        ``options`` is the ``ClaudeAgentOptions`` (merge :meth:`hooks` into its ``hooks``);
        ``transport`` is passed to ``query()``. The SDK's reader starts inside the turn, so
        its hooks and in-process (SDK MCP) tools see the turn as ``current_turn()``.
        """
        return ClaudeTurn(
            self,
            prompt,
            options=options,
            transport=transport,
            turn_id=turn_id,
            session_id="default",
        )

    @property
    def current(self) -> Turn | None:
        """The one open turn of this object (``None`` when there is none, or several)."""
        return self._active[0] if len(self._active) == 1 else None

    def _carries_history(self, client: Any, options: Any) -> bool:
        # Whether the prompt's session already holds the conversation's earlier turns: a
        # resumed or continued session, or a client that was prompted before (its session
        # holds those prompts, and the first one's context block with the turns before).
        if client is not None:
            options = getattr(client, "options", None)
        if getattr(options, "resume", None) or getattr(options, "continue_conversation", False):
            return True
        return client is not None and client in self._prompted

    def _release(self, turn: Turn) -> None:
        self._carried.discard(id(turn))
        if turn in self._active:
            self._active.remove(turn)
        for session, held in list(self._sessions.items()):
            if held is turn:
                del self._sessions[session]

    def _turn_for(self, data: Mapping[str, Any]) -> Turn | None:
        # The open turn a hook belongs to: the context's, else the one bound to its
        # session, else the only one open (then bound to the session for later hooks).
        turn = current_turn()
        if turn is not None and turn in self._active:
            return turn
        session = data.get("session_id")
        if isinstance(session, str) and session in self._sessions:
            return self._sessions[session]
        candidates = self._active
        if len(candidates) > 1 and data.get("hook_event_name") == "UserPromptSubmit":
            bound = set(map(id, self._sessions.values()))
            candidates = [
                t for t in candidates if id(t) not in bound and t.user_message == data.get("prompt")
            ]
        if len(candidates) != 1:
            return None
        if isinstance(session, str):
            self._sessions[session] = candidates[0]
        return candidates[0]

    # -------------------------------------------------------------- the hooks

    def hooks(self) -> dict[str, list[HookMatcher]]:
        """The hook matchers to merge into ``ClaudeAgentOptions.hooks``.

        ``UserPromptSubmit`` (the context), ``PostToolUse`` and ``PostToolUseFailure`` (tool
        calls), ``PreCompact`` (a ``context_event``). Merge with hooks of your own::

            hooks = nc.hooks()
            hooks.setdefault("PreToolUse", []).append(HookMatcher(hooks=[my_guard]))
        """
        return {
            "UserPromptSubmit": [HookMatcher(hooks=[self._on_prompt])],
            "PostToolUse": [HookMatcher(hooks=[self._on_tool])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._on_tool_failure])],
            "PreCompact": [HookMatcher(hooks=[self._on_compact])],
        }

    async def _on_prompt(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        turn = self._turn_for(data)
        if turn is None or not self.context or turn.state is not TurnState.OPEN:
            return {}
        block = turn.context(max_chars=self.context_chars, history=id(turn) not in self._carried)
        if not block:
            return {}
        return {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": block}
        }

    async def _on_tool(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        self._record(data, tool_use_id, "ok", data.get("tool_response"))
        return {}

    async def _on_tool_failure(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        status = "cancelled" if data.get("is_interrupt") else "error"
        self._record(data, tool_use_id, status, data.get("error"))
        return {}

    def _record(self, data: Any, tool_use_id: str | None, status: str, result: Any) -> None:
        turn = self._turn_for(data)
        if turn is None or turn.state is not TurnState.OPEN:
            return
        duration = data.get("duration_ms")
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
            duration = None
        ended = datetime.now(timezone.utc)
        invoked_at = ended - timedelta(milliseconds=duration) if duration is not None else ended
        call_id = data.get("tool_use_id") or tool_use_id
        try:
            turn.record_tool(
                str(data.get("tool_name") or "tool"),
                args=data.get("tool_input"),
                result=result,
                status=status,  # type: ignore[arg-type]
                invoked_at=invoked_at,
                duration_ms=duration,
                call_id=call_id if isinstance(call_id, str) and call_id else None,
            )
        except Exception as exc:
            # A hook that raises would only make the CLI log it: record what is known, never
            # the content (the exception text may quote the tool's input).
            reason = type(exc).__name__
            _logger.warning("tool.not_recorded tool_status=%s reason=%s", status, reason)

    async def _on_compact(self, data: Any, tool_use_id: str | None, context: Any) -> Any:
        observed = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        session = str(data.get("session_id") or "")
        turn = self._turn_for(data)
        # The server's declared context_event: identity [turn_key, event, observed_at] (the
        # turn's user key, or the session outside a turn); trigger and session_id stay on
        # the observation, as a server keeps fields its schema does not declare.
        fields: dict[str, Any] = {
            "turn_key": turn.turn_key if turn is not None else f"{session}:pre_compact",
            "event": "pre_compact",
            "observed_at": observed,
            "trigger": data.get("trigger"),
            "session_id": session,
        }
        if self.memory.platform:
            fields["harness"] = self.memory.platform
        try:
            with expect_undeclared_fields():
                if turn is not None and turn.state is TurnState.OPEN:
                    turn.remember(CONTEXT_EVENT_TYPE, **fields)
                else:
                    await self.memory.remember(CONTEXT_EVENT_TYPE, **fields)
        except Exception as exc:
            _logger.warning("context_event.not_recorded reason=%s", type(exc).__name__)
        return {}
