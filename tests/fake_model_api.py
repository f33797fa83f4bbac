"""Fake model APIs on 127.0.0.1, for running the real coding-agent programs offline.

One small aiohttp server (:class:`FakeModelAPI`: a background thread with its own event
loop, so a test can drive a subprocess synchronously; it binds 127.0.0.1 only) plays a
script of replies and records every request body. Each API is a subclass saying how it
answers:

- :class:`FakeAnthropic`: the Anthropic Messages API (``POST /v1/messages``, streamed as
  server-sent events, or one JSON body when the request does not ask for a stream), which
  the ``claude`` program bundled in the ``claude-agent-sdk`` wheel talks to at
  ``$ANTHROPIC_BASE_URL`` (:meth:`FakeAnthropic.env`);
- :class:`FakeResponses`: the OpenAI Responses API (``POST /v1/responses``, streamed),
  which Codex (``npm install @openai/codex``) talks to with ``wire_api = "responses"``
  (:meth:`FakeResponses.config` is the ``config.toml`` that points it here)::

    with FakeAnthropic([Text("Acme is a customer."), Call("Bash", {"command": "ls"}),
                        Text("Done.")]) as api:
        env = {**os.environ, **api.env()}        # ANTHROPIC_BASE_URL, a fake key, no traffic
        subprocess.run([claude, "-p", "hi"], env=env)
        api.requests                             # the JSON bodies the program sent

Replies are consumed by the *turn* requests only (each API says which those are); side
requests (a quota probe, a title request) get ``side_reply`` and do not move the script. An
empty script answers ``Text("ok")``. Kinds of reply, the same for every API:

- :class:`Text`: an assistant message, streamed in ``chunks`` deltas;
- :class:`Call`: a tool call (Anthropic's ``tool_use`` block, OpenAI's ``function_call``
  item); the program runs the tool and sends its result in the next request;
- :class:`Hang`: streams ``text`` and then holds the stream open until :meth:`release` (or
  the client goes away): the turn an interrupt lands in;
- :class:`Fail`: an HTTP error in the API's error envelope.

Any other route answers 404 and is recorded in :attr:`FakeModelAPI.unknown`.

``isolated=True`` serves from a network namespace of its own (``netns_support``): a
program started with :meth:`FakeModelAPI.command` runs inside it, reaches the fake on
127.0.0.1, and nothing else (``ProgramSandbox`` requires it: every third-party program
runs so).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

import attrs
from aiohttp import web
from netns_support import NetworkNamespace

__all__ = [
    "Call",
    "Fail",
    "FakeAnthropic",
    "FakeModelAPI",
    "FakeResponses",
    "Hang",
    "Reply",
    "Text",
]


@attrs.frozen
class Text:
    """An assistant message, streamed as ``chunks`` deltas."""

    text: str
    chunks: int = 3


@attrs.frozen
class Call:
    """A tool call: the model asks the program to run ``name`` with ``arguments``."""

    name: str
    arguments: Mapping[str, Any]
    #: the call's id without the API's prefix (``toolu_``, ``call_``)
    id: str = attrs.field(factory=lambda: uuid.uuid4().hex[:24])
    #: text the model says before the call
    text: str = ""


@attrs.frozen
class Hang:
    """Stream ``text``, then hold the stream open until released or the client leaves."""

    text: str


@attrs.frozen
class Fail:
    """An HTTP error answer, in the API's error envelope (``kind``: its error type)."""

    status: int = 400
    message: str = "fake refusal"
    kind: str = "invalid_request_error"


Reply = Text | Call | Hang | Fail

API = TypeVar("API", bound="FakeModelAPI")


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _chunks(reply: Reply) -> int:
    return reply.chunks if isinstance(reply, Text) else 1


class FakeModelAPI:
    """The server and its script; a subclass answers for one API (see the module docstring)."""

    #: the thread's name, and what a failed start names
    NAME: ClassVar[str] = "fake model API"
    #: the answer to a side request, unless the test gives its own
    SIDE_REPLY: ClassVar[Reply] = Text("Fake title")

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        port: int = 0,
        side_reply: Reply | None = None,
        isolated: bool = False,
    ) -> None:
        self._script: list[Reply] = list(script)
        self._port = port
        self._isolated = isolated
        #: the network namespace it serves in (``isolated=True``, once started)
        self.netns: NetworkNamespace | None = None
        self.side_reply = side_reply if side_reply is not None else self.SIDE_REPLY
        #: every request body, in arrival order (turn and side requests)
        self.requests: list[dict[str, Any]] = []
        #: the request bodies that consumed a scripted reply
        self.turn_requests: list[dict[str, Any]] = []
        #: ``(method, path)`` of every request to a route the fake does not serve
        self.unknown: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None
        self._ready = threading.Event()
        self._hanging = threading.Event()
        self.url = ""

    # ---------------------------------------------------------------- what an API says

    def _routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    def _is_turn(self, body: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _not_found(self) -> dict[str, Any]:
        raise NotImplementedError

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self: API) -> API:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start serving on 127.0.0.1; returns the base URL."""
        if self._isolated:
            self.netns = NetworkNamespace()
        self._thread = threading.Thread(target=self._serve, name=self.NAME, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the {self.NAME} did not start")
        return self.url

    def stop(self) -> None:
        """Release any hanging stream and stop the server."""
        loop = self._loop
        if loop is None:
            return
        self.release()
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None
        if self.netns is not None:
            self.netns.close()

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run where this fake serves: inside its network namespace if isolated."""
        return argv if self.netns is None else self.netns.command(argv)

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
        """Let a hanging stream end."""
        loop, released = self._loop, self._released
        if loop is not None and released is not None:
            loop.call_soon_threadsafe(released.set)

    def _next(self, body: Mapping[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(dict(body))
            if not self._is_turn(body):
                return self.side_reply
            self.turn_requests.append(dict(body))
            return self._script.pop(0) if self._script else Text("ok")

    async def _hold(self) -> None:
        """A :class:`Hang` has streamed its text: wait until released. The client leaving
        cancels the handler, which ends the stream too."""
        self._hanging.set()
        assert self._released is not None
        await self._released.wait()

    # ---------------------------------------------------------------- server

    def _serve(self) -> None:
        if self.netns is not None:
            self.netns.enter()  # this thread binds, and serves, inside the namespace
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
        self._routes(app.router)
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
        with self._lock:
            self.unknown.append((request.method, request.path))
        return web.json_response(self._not_found(), status=404)

    @staticmethod
    async def _open_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        return response


# -------------------------------------------------------------------- Anthropic Messages

ANTHROPIC_MODEL = "claude-sonnet-4-5"


def _anthropic_sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class FakeAnthropic(FakeModelAPI):
    """The Anthropic Messages API: a turn request carries the program's tools or asks for a
    stream; a request that does not ask for one gets one JSON body."""

    NAME = "fake Anthropic API"

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

    def _routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/messages", self._messages)
        router.add_post("/v1/messages/count_tokens", self._count_tokens)

    def _is_turn(self, body: Mapping[str, Any]) -> bool:
        return bool(body.get("tools")) or bool(body.get("stream"))

    def _not_found(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "not_found_error", "message": "no route"}}

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"input_tokens": 10})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = self._next(body)
        if isinstance(reply, Fail):
            return web.json_response(
                {"type": "error", "error": {"type": reply.kind, "message": reply.message}},
                status=reply.status,
            )
        message = self._whole(reply, str(body.get("model") or ANTHROPIC_MODEL))
        if not body.get("stream"):
            return web.json_response(message)
        return await self._stream(request, reply, message)

    @staticmethod
    def _whole(reply: Text | Call | Hang, model: str) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = []
        if not isinstance(reply, Call) or reply.text:
            blocks.append({"type": "text", "text": reply.text})
        if isinstance(reply, Call):
            call_id = f"toolu_{reply.id}"
            blocks.append(
                {"type": "tool_use", "id": call_id, "name": reply.name, "input": reply.arguments}
            )
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": "tool_use" if isinstance(reply, Call) else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    async def _stream(
        self, request: web.Request, reply: Reply, message: dict[str, Any]
    ) -> web.StreamResponse:
        response = await self._open_stream(request)
        start = {**message, "content": [], "stop_reason": None}
        await response.write(
            _anthropic_sse("message_start", {"type": "message_start", "message": start})
        )
        for index, block in enumerate(message["content"]):
            await self._stream_block(response, index, block, reply)
        if isinstance(reply, Hang):
            try:
                await self._hold()
            except (asyncio.CancelledError, ConnectionResetError):
                return response
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
        try:
            await response.write(_anthropic_sse("message_delta", delta))
            await response.write(_anthropic_sse("message_stop", {"type": "message_stop"}))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    @staticmethod
    async def _stream_block(
        response: web.StreamResponse, index: int, block: Mapping[str, Any], reply: Reply
    ) -> None:
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            # a text block has at least one delta, an empty one for an empty text
            parts = _split(block["text"], _chunks(reply)) or [""]
            deltas = [{"type": "text_delta", "text": part} for part in parts]
        else:
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        start = {"type": "content_block_start", "index": index, "content_block": opening}
        await response.write(_anthropic_sse("content_block_start", start))
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            await response.write(_anthropic_sse("content_block_delta", event))
        if isinstance(reply, Hang):
            return  # the block stays open: the stream is cut mid-reply
        stop = {"type": "content_block_stop", "index": index}
        await response.write(_anthropic_sse("content_block_stop", stop))


# -------------------------------------------------------------------- OpenAI Responses

RESPONSES_MODEL = "gpt-fake-offline"


def _responses_sse(data: Mapping[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


class FakeResponses(FakeModelAPI):
    """The OpenAI Responses API: a turn request carries the program's tools (a title
    request does not); every answer is a stream."""

    NAME = "fake Responses API"
    SIDE_REPLY = Text("Title")

    def config(self, *, model: str = RESPONSES_MODEL) -> str:
        """A ``config.toml`` whose only model provider is this fake (no key, no login)."""
        return (
            f'model = "{model}"\n'
            'model_provider = "fake"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            "check_for_update_on_startup = false\n"
            "[analytics]\nenabled = false\n"
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{self.url}/v1"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def _routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/responses", self._responses)

    def _is_turn(self, body: Mapping[str, Any]) -> bool:
        return bool(body.get("tools"))

    def _not_found(self) -> dict[str, Any]:
        return {"error": {"message": "no route", "type": "invalid_request_error"}}

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = self._next(body)
        if isinstance(reply, Fail):
            error = {"message": reply.message, "type": reply.kind, "code": reply.kind}
            return web.json_response({"error": error}, status=reply.status)
        return await self._stream(request, reply, str(body.get("model") or RESPONSES_MODEL))

    async def _stream(
        self, request: web.Request, reply: Text | Call | Hang, model: str
    ) -> web.StreamResponse:
        response = await self._open_stream(request)
        rid = f"resp_{uuid.uuid4().hex[:24]}"
        head = {"id": rid, "object": "response", "model": model, "status": "in_progress"}
        await response.write(_responses_sse({"type": "response.created", "response": head}))
        items: list[dict[str, Any]] = []
        try:
            if reply.text or isinstance(reply, Hang):
                item = await self._message(response, len(items), reply)
                if item is None:
                    return response  # a Hang: the client went away or was released
                items.append(item)
            if isinstance(reply, Call):
                call = {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:24]}",
                    "call_id": f"call_{reply.id}",
                    "name": reply.name,
                    "arguments": json.dumps(reply.arguments),
                    "status": "completed",
                }
                at = {"output_index": len(items)}
                opening = {**call, "arguments": "", "status": "in_progress"}
                added = {"type": "response.output_item.added", **at, "item": opening}
                await response.write(_responses_sse(added))
                done = {"type": "response.output_item.done", **at, "item": call}
                await response.write(_responses_sse(done))
                items.append(call)
            usage = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            }
            whole = {**head, "status": "completed", "output": items, "usage": usage}
            await response.write(_responses_sse({"type": "response.completed", "response": whole}))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    async def _message(
        self, response: web.StreamResponse, index: int, reply: Text | Call | Hang
    ) -> dict[str, Any] | None:
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        opening = {
            "type": "message",
            "id": mid,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        at = {"item_id": mid, "output_index": index, "content_index": 0}
        added = {"type": "response.output_item.added", "output_index": index, "item": opening}
        await response.write(_responses_sse(added))
        part = {"type": "output_text", "text": "", "annotations": []}
        await response.write(
            _responses_sse({"type": "response.content_part.added", **at, "part": part})
        )
        for delta in _split(reply.text, _chunks(reply)):
            event = {"type": "response.output_text.delta", **at, "delta": delta}
            await response.write(_responses_sse(event))
        if isinstance(reply, Hang):
            await self._hold()
            return None
        done = {"type": "response.output_text.done", **at, "text": reply.text}
        await response.write(_responses_sse(done))
        text = {"type": "output_text", "text": reply.text, "annotations": []}
        item = {**opening, "status": "completed", "content": [text]}
        finished = {"type": "response.output_item.done", "output_index": index, "item": item}
        await response.write(_responses_sse(finished))
        return item
