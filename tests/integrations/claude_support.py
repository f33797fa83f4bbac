"""A fake ``claude`` command line behind the SDK's public ``Transport`` seam.

It speaks the CLI's side of the SDK's control protocol: answers ``initialize`` (keeping the
hook callback ids each event registered) and ``interrupt``, and for each user message plays
the next script, step by step: hook callbacks (it waits for the SDK's answer and keeps it),
``stream_event`` text deltas, ``assistant`` messages, a ``result``. No process, no network.

Steps (tuples): ``("hook", event, fields)``; ``("delta", text)``; ``("assistant", text)``;
``("tool_use", name, input, tool_use_id)`` (an assistant message asking for a tool);
``("error_assistant", text)`` (the CLI's stand-in for a failed API call);
``("call", async_fn)``; ``("wait",)`` (until interrupted, then an ``error_during_execution``
result);
``("result", subtype, is_error, result, terminal_reason[, structured_output])``;
``("end",)`` (close the stream with no result); ``("raise", exc)`` (the transport fails).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
from claude_agent_sdk import Transport

SESSION = "0b4b8c1e-5f2a-4d8e-9c55-3d2f6c1b7a90"


def success(text: str) -> tuple[Any, ...]:
    return ("result", "success", False, text, "completed")


class FakeCLI(Transport):
    """A scripted Claude Code CLI; use as ``async with FakeCLI(scripts) as cli:``."""

    def __init__(self, *scripts: list[tuple[Any, ...]]) -> None:
        self._scripts = list(scripts)
        self._out_send, self._out_recv = anyio.create_memory_object_stream[Any](math.inf)
        self._answers: dict[str, anyio.Event] = {}
        self._answer_values: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._interrupted = anyio.Event()
        self._tg: Any = None
        self.hooks: dict[str, list[str]] = {}
        self.hook_answers: list[tuple[str, Any]] = []
        self.prompts: list[Any] = []
        self.interrupts = 0
        self.ready = False

    async def __aenter__(self) -> FakeCLI:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(*exc)
        finally:
            self._out_send.close()
            self._out_recv.close()

    # ---------------------------------------------------------- Transport

    async def connect(self) -> None:
        self.ready = True

    def is_ready(self) -> bool:
        return self.ready

    async def close(self) -> None:
        self.ready = False
        self._out_send.close()

    async def end_input(self) -> None:
        # query() ends its input after the result: the real CLI then exits.
        self._out_send.close()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        # An iterator object, not an async generator: the SDK may stop reading it midway,
        # and a generator left so would be finalised (and warned about) by the GC.
        return _Reader(self._out_recv)

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            if line.strip():
                self._receive(json.loads(line))

    # ---------------------------------------------------------- the CLI's side

    def _emit(self, message: Any) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._out_send.send_nowait(message)

    def _receive(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "control_request":
            request = message["request"]
            if request["subtype"] == "initialize":
                for event, matchers in (request.get("hooks") or {}).items():
                    for matcher in matchers:
                        self.hooks.setdefault(event, []).extend(matcher["hookCallbackIds"])
            elif request["subtype"] == "interrupt":
                self.interrupts += 1
                self._interrupted.set()
            self._emit(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "success",
                        "request_id": message["request_id"],
                        "response": {},
                    },
                }
            )
        elif kind == "control_response":
            response = message["response"]
            request_id = response["request_id"]
            self._answer_values[request_id] = response.get("response", response.get("error"))
            self._answers[request_id].set()
        elif kind == "user":
            self.prompts.append(message["message"]["content"])
            script = self._scripts.pop(0)
            self._interrupted = anyio.Event()
            self._tg.start_soon(self._play, script)

    async def _hook(self, event: str, fields: dict[str, Any]) -> None:
        data = {
            "hook_event_name": event,
            "session_id": SESSION,
            "transcript_path": "/tmp/fake-transcript.jsonl",
            "cwd": "/tmp",
            **fields,
        }
        for callback_id in self.hooks.get(event, []):
            request_id = f"cli_{next(self._ids)}"
            self._answers[request_id] = anyio.Event()
            self._emit(
                {
                    "type": "control_request",
                    "request_id": request_id,
                    "request": {
                        "subtype": "hook_callback",
                        "callback_id": callback_id,
                        "input": data,
                        "tool_use_id": fields.get("tool_use_id"),
                    },
                }
            )
            await self._answers[request_id].wait()
            self.hook_answers.append((event, self._answer_values.pop(request_id)))

    async def _play(self, script: list[tuple[Any, ...]]) -> None:
        for step in script:
            kind = step[0]
            if kind == "hook":
                await self._hook(step[1], dict(step[2]))
            elif kind == "delta":
                self._emit(
                    {
                        "type": "stream_event",
                        "uuid": f"ev-{next(self._ids)}",
                        "session_id": SESSION,
                        "event": {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": step[1]},
                        },
                        "parent_tool_use_id": None,
                    }
                )
            elif kind in ("assistant", "error_assistant", "tool_use"):
                if kind == "tool_use":
                    content = [
                        {"type": "tool_use", "id": step[3], "name": step[1], "input": step[2]}
                    ]
                else:
                    content = [{"type": "text", "text": step[1]}]
                message: dict[str, Any] = {
                    "type": "assistant",
                    "message": {"role": "assistant", "model": "fake-model", "content": content},
                    "parent_tool_use_id": None,
                    "session_id": SESSION,
                }
                if kind == "error_assistant":
                    message["error"] = "invalid_request"
                self._emit(message)
            elif kind == "wait":
                await self._interrupted.wait()
                self._emit(_result("error_during_execution", True, None, "aborted_streaming"))
                return
            elif kind == "result":
                self._emit(_result(*step[1:]))
                return
            elif kind == "end":
                await anyio.sleep(0.05)  # as a process exiting after its last line
                self._out_send.close()
                return
            elif kind == "call":
                await step[1]()
            elif kind == "raise":
                self._emit(step[1])
                return
            await anyio.lowlevel.checkpoint()


class _Reader:
    def __init__(self, receive: Any) -> None:
        self._receive = receive

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            message = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(message, BaseException):
            raise message
        return message  # type: ignore[no-any-return]


def _result(
    subtype: str, is_error: bool, result: str | None, reason: str, structured: Any = None
) -> dict[str, Any]:
    extra = {} if structured is None else {"structured_output": structured}
    return {
        **extra,
        "type": "result",
        "subtype": subtype,
        "duration_ms": 5,
        "duration_api_ms": 3,
        "is_error": is_error,
        "num_turns": 1,
        "session_id": SESSION,
        "result": result,
        "terminal_reason": reason,
    }
