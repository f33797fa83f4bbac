"""A fake OpenAI Responses API on 127.0.0.1, for running the real Codex program offline.

Codex (``npm install @openai/codex``, a native program) talks to a model provider's
``base_url`` with ``wire_api = "responses"``; :meth:`FakeResponses.config` is the
``config.toml`` that points it here. The fake answers ``POST /v1/responses`` as a stream of
server-sent events from a script of replies, and records every request body::

    with FakeResponses([Call("shell", {"command": ["echo", "hi"]}), Text("Done.")]) as api:
        (codex_home / "config.toml").write_text(api.config())
        subprocess.run([codex, "exec", "hi"], env={"CODEX_HOME": codex_home, ...})
        api.requests                             # the JSON bodies the program sent

Kinds of reply:

- :class:`Text`: an assistant message, streamed in ``chunks`` deltas;
- :class:`Call`: a ``function_call`` item (the program runs the tool and sends its output
  in the next request), optionally after some text;
- :class:`Hang`: streams ``text`` and then holds the stream open until :meth:`release` (or
  the client goes away): the turn an interrupt lands in;
- :class:`Fail`: an HTTP error with OpenAI's error envelope.

Requests that do not look like a turn (no ``tools``: e.g. a title request) get
:attr:`FakeResponses.side_reply` and do not move the script. Any other route answers 404.
It runs in a background thread with its own event loop and binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from aiohttp import web

__all__ = ["Call", "Fail", "FakeResponses", "Hang", "Reply", "Text"]

MODEL = "gpt-fake-offline"


@attrs.frozen
class Text:
    """An assistant message, streamed as ``chunks`` deltas."""

    text: str
    chunks: int = 3


@attrs.frozen
class Call:
    """A ``function_call``: the model asks the program to run tool ``name``."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str = attrs.field(factory=lambda: f"call_{uuid.uuid4().hex[:20]}")
    #: text the model says before the call
    text: str = ""


@attrs.frozen
class Hang:
    """Stream ``text``, then hold the stream open until released or the client leaves."""

    text: str


@attrs.frozen
class Fail:
    """An HTTP error answer, in OpenAI's error envelope."""

    status: int = 400
    message: str = "fake refusal"
    code: str = "invalid_request_error"


Reply = Text | Call | Hang | Fail


def _sse(data: Mapping[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


class FakeResponses:
    """The fake API; a context manager that starts and stops it (see the module docstring)."""

    def __init__(
        self, script: Iterable[Reply] = (), *, port: int = 0, side_reply: Reply = Text("Title")
    ) -> None:
        self._script: list[Reply] = list(script)
        self._port = port
        self.side_reply = side_reply
        #: every request body, in arrival order
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

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> FakeResponses:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start serving on 127.0.0.1; returns the base URL."""
        self._thread = threading.Thread(target=self._serve, name="fake-responses", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake Responses API did not start")
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

    def config(self, *, model: str = MODEL) -> str:
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
            if not body.get("tools"):
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
        app.router.add_post("/v1/responses", self._responses)
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
        error = {"error": {"message": "no route", "type": "invalid_request_error"}}
        return web.json_response(error, status=404)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = self._next(body)
        if isinstance(reply, Fail):
            error = {"message": reply.message, "type": reply.code, "code": reply.code}
            return web.json_response({"error": error}, status=reply.status)
        return await self._stream(request, reply, str(body.get("model") or MODEL))

    async def _stream(self, request: web.Request, reply: Reply, model: str) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        rid = f"resp_{uuid.uuid4().hex[:24]}"
        head = {"id": rid, "object": "response", "model": model, "status": "in_progress"}
        await response.write(_sse({"type": "response.created", "response": head}))
        items: list[dict[str, Any]] = []
        text = reply.text if isinstance(reply, Text | Call | Hang) else ""
        try:
            if text or isinstance(reply, Hang):
                item = await self._message(response, len(items), text, reply)
                if item is None:
                    return response  # a Hang: the client went away or was released
                items.append(item)
            if isinstance(reply, Call):
                call = {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:24]}",
                    "call_id": reply.call_id,
                    "name": reply.name,
                    "arguments": json.dumps(reply.arguments),
                    "status": "completed",
                }
                index = len(items)
                await response.write(
                    _sse(
                        {
                            "type": "response.output_item.added",
                            "output_index": index,
                            "item": {**call, "arguments": "", "status": "in_progress"},
                        }
                    )
                )
                await response.write(
                    _sse({"type": "response.output_item.done", "output_index": index, "item": call})
                )
                items.append(call)
            done = {**head, "status": "completed", "output": items, "usage": _usage()}
            await response.write(_sse({"type": "response.completed", "response": done}))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    async def _message(
        self, response: web.StreamResponse, index: int, text: str, reply: Reply
    ) -> dict[str, Any] | None:
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        opening = {
            "type": "message",
            "id": mid,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        await response.write(
            _sse({"type": "response.output_item.added", "output_index": index, "item": opening})
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        await response.write(
            _sse(
                {
                    "type": "response.content_part.added",
                    "item_id": mid,
                    "output_index": index,
                    "content_index": 0,
                    "part": part,
                }
            )
        )
        chunks = reply.chunks if isinstance(reply, Text) else 1
        for delta in _split(text, chunks):
            await response.write(
                _sse(
                    {
                        "type": "response.output_text.delta",
                        "item_id": mid,
                        "output_index": index,
                        "content_index": 0,
                        "delta": delta,
                    }
                )
            )
        if isinstance(reply, Hang):
            self._hanging.set()
            assert self._released is not None
            # The client leaving cancels this handler: that ends the stream too.
            await self._released.wait()
            return None
        whole = {"type": "output_text", "text": text, "annotations": []}
        await response.write(
            _sse(
                {
                    "type": "response.output_text.done",
                    "item_id": mid,
                    "output_index": index,
                    "content_index": 0,
                    "text": text,
                }
            )
        )
        item = {**opening, "status": "completed", "content": [whole]}
        await response.write(
            _sse({"type": "response.output_item.done", "output_index": index, "item": item})
        )
        return item
