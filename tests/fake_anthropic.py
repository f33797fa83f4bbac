"""A fake Anthropic Messages API on 127.0.0.1, for running the real Claude Code program offline.

The ``claude`` program bundled in the ``claude-agent-sdk`` wheel talks to
``$ANTHROPIC_BASE_URL``; point it here and it runs whole turns with no network. The fake
answers ``POST /v1/messages`` (streamed as server-sent events, or as one JSON body when the
request does not ask for a stream) from a script of replies, and records every request::

    with FakeAnthropic([Text("Acme is a customer."), ToolUse("Bash", {"command": "ls"}),
                        Text("Done.")]) as api:
        env = {**os.environ, **api.env()}        # ANTHROPIC_BASE_URL, a fake key, no traffic
        subprocess.run([claude, "-p", "hi"], env=env)
        api.requests                             # the JSON bodies the program sent

Replies are consumed by the *turn* requests only: a request that carries the program's
tool list or asks for a stream while the script is not empty. Side requests (a quota probe,
a title or topic request on a small model) get :attr:`FakeAnthropic.side_reply` and do not
move the script. An empty script answers ``Text("ok")``.

Kinds of reply:

- :class:`Text`: a text block, streamed in ``chunks`` deltas;
- :class:`ToolUse`: a ``tool_use`` block (``stop_reason: tool_use``); the program runs the
  tool and sends its result in the next request;
- :class:`Hang`: streams ``text`` and then holds the stream open until :meth:`release` (or
  the client goes away): the turn an interrupt lands in;
- :class:`Fail`: an HTTP error with Anthropic's error envelope.

It runs in a background thread with its own event loop, so a test can drive a subprocess
synchronously. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from aiohttp import web

__all__ = ["Fail", "FakeAnthropic", "Hang", "Reply", "Text", "ToolUse"]

MODEL = "claude-sonnet-4-5"


@attrs.frozen
class Text:
    """A text reply, streamed as ``chunks`` deltas (at least one)."""

    text: str
    chunks: int = 3


@attrs.frozen
class ToolUse:
    """A ``tool_use`` reply: the model asks the program to run ``name`` with ``input``."""

    name: str
    input: Mapping[str, Any]
    id: str = attrs.field(factory=lambda: f"toolu_{uuid.uuid4().hex[:24]}")
    #: text the model says before the call
    text: str = ""


@attrs.frozen
class Hang:
    """Stream ``text``, then hold the stream open until released or the client leaves."""

    text: str


@attrs.frozen
class Fail:
    """An HTTP error answer, in Anthropic's error envelope."""

    status: int = 400
    message: str = "fake refusal"
    error_type: str = "invalid_request_error"


Reply = Text | ToolUse | Hang | Fail


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return [""]
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage() -> dict[str, int]:
    return {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


class FakeAnthropic:
    """The fake API; a context manager that starts and stops it (see the module docstring)."""

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        port: int = 0,
        side_reply: Reply = Text("Fake title"),
    ) -> None:
        self._script: list[Reply] = list(script)
        self._port = port
        self.side_reply = side_reply
        #: every request body, in arrival order (turn and side requests)
        self.requests: list[dict[str, Any]] = []
        #: the request bodies that consumed a scripted reply
        self.turn_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None
        self._ready = threading.Event()
        self._hanging = threading.Event()
        self.url = ""

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> FakeAnthropic:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start serving on 127.0.0.1; returns the base URL."""
        self._thread = threading.Thread(target=self._serve, name="fake-anthropic", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake Anthropic API did not start")
        return self.url

    def stop(self) -> None:
        """Release any hanging stream and stop the server."""
        loop = self._loop
        if loop is None:
            return
        self.release()
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        fut.result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def env(self) -> dict[str, str]:
        """What the ``claude`` program needs to talk only to this fake."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-ant-fake-offline",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }

    # ---------------------------------------------------------------- script

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._script)

    def wait_hanging(self, timeout: float = 30.0) -> bool:
        """Block until a :class:`Hang` reply has streamed its text."""
        return self._hanging.wait(timeout)

    def release(self) -> None:
        """Let a hanging stream end (with ``end_turn``)."""
        loop, released = self._loop, self._released
        if loop is not None and released is not None:
            loop.call_soon_threadsafe(released.set)

    def _next(self, body: Mapping[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(dict(body))
            is_turn = bool(body.get("tools")) or bool(body.get("stream"))
            if not is_turn:
                return self.side_reply
            self.turn_requests.append(dict(body))
            return self._script.pop(0) if self._script else Text("ok")

    # ---------------------------------------------------------------- server

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._start())
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _start(self) -> None:
        self._released = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _other(self, request: web.Request) -> web.StreamResponse:
        error = {"type": "error", "error": {"type": "not_found_error", "message": "no route"}}
        return web.json_response(error, status=404)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"input_tokens": 10})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = self._next(body)
        if isinstance(reply, Fail):
            return web.json_response(
                {"type": "error", "error": {"type": reply.error_type, "message": reply.message}},
                status=reply.status,
            )
        model = str(body.get("model") or MODEL)
        if not body.get("stream"):
            return web.json_response(self._whole(reply, model))
        return await self._stream(request, reply, model)

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        if isinstance(reply, ToolUse):
            blocks: list[dict[str, Any]] = []
            if reply.text:
                blocks.append({"type": "text", "text": reply.text})
            blocks.append(
                {"type": "tool_use", "id": reply.id, "name": reply.name, "input": reply.input}
            )
            return blocks
        assert isinstance(reply, Text | Hang)
        return [{"type": "text", "text": reply.text}]

    def _whole(self, reply: Reply, model: str) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if isinstance(reply, ToolUse) else "end_turn",
            "stop_sequence": None,
            "usage": _usage(),
        }

    async def _stream(self, request: web.Request, reply: Reply, model: str) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        message = self._whole(reply, model)
        start = {**message, "content": [], "stop_reason": None}
        await response.write(_sse("message_start", {"type": "message_start", "message": start}))
        for index, block in enumerate(message["content"]):
            await self._stream_block(response, index, block, reply)
        if isinstance(reply, Hang):
            self._hanging.set()
            assert self._released is not None
            try:
                await self._released.wait()
            except (asyncio.CancelledError, ConnectionResetError):
                return response
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
        try:
            await response.write(_sse("message_delta", delta))
            await response.write(_sse("message_stop", {"type": "message_stop"}))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    async def _stream_block(
        self, response: web.StreamResponse, index: int, block: Mapping[str, Any], reply: Reply
    ) -> None:
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas: Sequence[dict[str, Any]] = [
                {"type": "text_delta", "text": part}
                for part in _split(block["text"], reply.chunks if isinstance(reply, Text) else 1)
            ]
        else:
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        await response.write(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        for delta in deltas:
            await response.write(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        if isinstance(reply, Hang):
            return  # the block stays open: the stream is cut mid-reply
        await response.write(
            _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        )
