"""HttpTransport: the Transport protocol over a real Neotoma server's REST routes.

Built on aiohttp, so it runs on **asyncio only** (the embedded store also runs on trio).

It parses what the server really sends rather than what its documentation idealises
(reference/neotoma-semantics.md): ``store`` answers are aligned to the request by
``observation_index``, or by entity identity on a replay (which lists entries newest first
and without an index); lookups carry ``id`` rather than ``entity_id``; errors come in two
JSON envelope families, an HTML page or plain text, and all of them land on the
:mod:`neotoma_agent.exceptions` tree.

Every method here is safe to retry: lookups and snapshot reads are reads, ``store`` and
``correct`` carry deterministic idempotency keys (a retried store replays instead of writing
twice), and ``create_relationship(s)`` collapse a repeated edge onto one key. So transient
failures (connection errors, timeouts, 429, 502/503/504 and envelopes that say
``retryable: true``) are retried with exponential backoff and full jitter, within a bounded
number of attempts and a bounded total time; other 4xx never are.

With ``outbox=PATH``, a closing store that still fails transiently after its retries is
queued in a local SQLite file (:mod:`neotoma_agent.transport._outbox`) and delivered later,
in order per conversation: by a background task while the transport is open, by
:meth:`HttpTransport.flush_outbox`, and at the next open of the same file.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import io
import json
import os
import random
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import anyio
import anyio.to_thread
import attrs

from neotoma_agent._log import get_logger
from neotoma_agent._version import __version__
from neotoma_agent.exceptions import (
    APIError,
    ConnectionLost,
    ConnectTimeout,
    NeotomaError,
    ReadTimeout,
    ServerError,
    TransportError,
)
from neotoma_agent.transport._base import StoreResult
from neotoma_agent.transport._outbox import (
    DEFAULT_MAX_ENTRIES,
    Outbox,
    OutboxFlush,
    StoreOutcome,
    expected_result,
)
from neotoma_agent.transport._rest import RestActions, store_body
from neotoma_agent.transport._retry import RetryPolicy, is_transient
from neotoma_agent.transport._warm import Warmer
from neotoma_agent.transport._wire import error_from_response, parse_retry_after

__all__ = ["HttpTransport", "RetryPolicy", "flush_outbox"]

_log = get_logger()

#: bodies from this size on are sent as a stream (see _attempt)
_STREAM_ABOVE = 2**20


class _State(enum.Enum):
    IDLE = "idle"  # no session yet: one is created on the first request
    OPEN = "open"
    CLOSED = "closed"


@attrs.frozen
class _Answer:
    status: int
    headers: Mapping[str, str]
    body: object  # decoded JSON, or the text when the body is not JSON


class HttpTransport(RestActions):
    """A :class:`~neotoma_agent.Transport` talking to a Neotoma server over HTTP (asyncio only).

    ``base_url`` is the server root (routes live there, no ``/api`` prefix). Without
    ``token`` no ``Authorization`` header is sent: a local Neotoma accepts loopback requests
    without one, and refuses made-up tokens such as ``dev-local``. The token never appears in
    ``repr``, log events or error messages.

    One ``aiohttp.ClientSession`` with at most ``max_connections`` connections is created on
    the running event loop at the first request and released by :meth:`aclose` (or
    ``async with``); a closed transport refuses further requests. ``timeout`` bounds one
    attempt (connect, send, answer), ``connect_timeout`` the TCP connect alone, and ``retry``
    the retries (see :class:`RetryPolicy`).

    ``outbox`` (a file path) turns on the outbox: a closing store (reply or abandoned record)
    that still fails after its retries with a transient failure (connection refused or lost,
    timeout, 5xx, 429) is appended durably to that SQLite file, same body and key, and the
    turn ends normally with ``t.result.queued``. A 4xx or a mismatch is never queued. Queued
    stores are delivered in order per conversation by a background task while the transport
    is open (every ``outbox_poll`` seconds when idle, backing off up to a minute while the
    server stays down), by :meth:`flush_outbox`, and at the next open of the same file; a
    conversation's later stores wait behind its queued ones. ``outbox_max_entries`` bounds
    the file (over it, :class:`~neotoma_agent.OutboxFullError`, never a dropped entry).
    ``outbox_background=False`` leaves delivery to :meth:`flush_outbox` and to the
    conversations' own later stores (a one-shot flush, a test).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:3080",
        token: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 32,
        retry: RetryPolicy | None = None,
        outbox: str | os.PathLike[str] | None = None,
        outbox_max_entries: int = DEFAULT_MAX_ENTRIES,
        outbox_poll: float = 5.0,
        outbox_background: bool = True,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.username is not None or parsed.password is not None:
            # Credentials in the URL would leak into reprs and error messages.
            raise ValueError("base_url must not carry credentials; pass token= instead")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if token is not None and not token:
            raise ValueError("token must be a non-empty string or None")
        if timeout <= 0 or connect_timeout <= 0:
            raise ValueError("timeout and connect_timeout must be > 0")
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if outbox_max_entries < 1:
            raise ValueError("outbox_max_entries must be >= 1")
        if not outbox_poll > 0:
            raise ValueError("outbox_poll must be > 0")
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._max_connections = max_connections
        self._retry = retry if retry is not None else RetryPolicy()
        self._state = _State.IDLE
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox_path = None if outbox is None else os.fspath(outbox)
        self._outbox_max_entries = outbox_max_entries
        self._outbox_poll = float(outbox_poll)
        self._outbox_background = outbox_background
        self._outbox: Outbox | None = None
        self._outbox_opening: asyncio.Lock | None = None
        self._delivery: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._lanes: dict[str, tuple[asyncio.Lock, int]] = {}
        self._warmer = Warmer()

    @property
    def base_url(self) -> str:
        """The server root this transport talks to."""
        return self._base_url

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in force."""
        return self._retry

    @property
    def outbox(self) -> str | None:
        """The outbox file's path, or ``None`` without an outbox."""
        return self._outbox_path

    def __repr__(self) -> str:
        token = "'***'" if self._token is not None else "None"
        outbox = "" if self._outbox_path is None else f", outbox={self._outbox_path!r}"
        return (
            f"HttpTransport(base_url={self._base_url!r}, token={token}{outbox}, "
            f"state={self._state.value!r})"
        )

    async def __aenter__(self) -> HttpTransport:
        if self._state is _State.CLOSED:
            raise RuntimeError("HttpTransport is closed; create a new one")
        if self._outbox_path is not None:
            # Opening the outbox starts delivering what an earlier run left queued.
            await self._open_outbox()
        return self

    # __aexit__ (close) comes from AsyncClosing.

    async def aclose(self) -> None:
        """Close the connection pool (and the outbox); idempotent. No reopening.

        Entries still queued stay in the outbox file for the next open.
        """
        self._state = _State.CLOSED
        delivery, self._delivery = self._delivery, None
        if delivery is not None:
            # A cancellation that lands while a worker thread runs an outbox call can be
            # absorbed by that call's shield; cancel until the task has really ended.
            while not delivery.done():
                delivery.cancel()
                await asyncio.wait([delivery], timeout=0.1)
        await self._warmer.aclose()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.close()

    # --- the outbox -----------------------------------------------------------------------

    async def store_ordered(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]] = (),
        lane: str,
        deferrable: bool,
    ) -> StoreOutcome:
        """``store``, kept in order within ``lane`` (a conversation), queued if it must be.

        Without an outbox this is :meth:`store`. With one, a store of a lane that has queued
        entries first delivers them (in order); if they cannot be delivered yet, a
        ``deferrable`` store is queued behind them and any other raises the error that
        stopped delivery, unsent. A ``deferrable`` store that fails after its retries with a
        transient failure is queued (durably, before this returns); any other failure raises.
        """
        if self._outbox_path is None:
            result = await self.store(
                entities, idempotency_key=idempotency_key, relationships=relationships
            )
            return StoreOutcome(result)
        outbox = await self._open_outbox()
        body = store_body(entities, idempotency_key=idempotency_key, relationships=relationships)
        async with self._lane(lane):
            if await anyio.to_thread.run_sync(outbox.has_lane, lane):
                _, stuck = await self._drain(outbox, lane)
                if stuck is not None:
                    if deferrable:
                        return await self._enqueue(outbox, lane, body, stuck)
                    raise stuck
            try:
                raw = await self.request("store", body)
            except NeotomaError as exc:
                if deferrable and is_transient(exc):
                    return await self._enqueue(outbox, lane, body, exc)
                raise
        return StoreOutcome(StoreResult.from_json(raw, request_entities=body["entities"]))

    async def flush_outbox(self) -> OutboxFlush:
        """Deliver every queued entry now, in order per conversation; what was done.

        Stops a conversation at its first transient failure (its later entries stay behind
        it); an entry the server refuses for good is kept as ``dead`` and logged at ERROR.
        Without an outbox there is nothing to do.
        """
        if self._outbox_path is None:
            return OutboxFlush(delivered=0, remaining=0, dead=0)
        return await self._deliver_all(await self._open_outbox())

    async def _open_outbox(self) -> Outbox:
        assert self._outbox_path is not None
        self._session_for_loop()  # refuses a closed transport or another loop, as requests do
        if self._outbox is None:
            if self._outbox_opening is None:
                self._outbox_opening = asyncio.Lock()
            async with self._outbox_opening:
                if self._outbox is None:
                    path, bound = self._outbox_path, self._outbox_max_entries
                    self._outbox = await anyio.to_thread.run_sync(
                        functools.partial(Outbox, path, max_entries=bound)
                    )
        if self._outbox_background and self._delivery is None and self._state is not _State.CLOSED:
            self._wake = asyncio.Event()
            self._delivery = asyncio.get_running_loop().create_task(
                self._deliver_forever(self._outbox), name="neotoma-agent outbox delivery"
            )
        return self._outbox

    @contextlib.asynccontextmanager
    async def _lane(self, lane: str) -> AsyncIterator[None]:
        # One lock per conversation while anyone uses it: its stores and its deliveries
        # take turns in this process (other processes are kept in order by the file).
        lock, users = self._lanes.get(lane, (asyncio.Lock(), 0))
        self._lanes[lane] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._lanes[lane]
            if users <= 1:
                del self._lanes[lane]
            else:
                self._lanes[lane] = (lock, users - 1)

    async def _enqueue(
        self, outbox: Outbox, lane: str, body: Mapping[str, Any], cause: NeotomaError
    ) -> StoreOutcome:
        key = str(body["idempotency_key"])
        entry_id = await anyio.to_thread.run_sync(outbox.append, lane, "store", key, body)
        _log.warning(
            "outbox.queued",
            entry_id=entry_id,
            idempotency_key=key,
            error=_describe(cause),
        )
        if self._wake is not None:
            self._wake.set()
        return StoreOutcome(expected_result(body["entities"]), queued=True)

    async def _drain(self, outbox: Outbox, lane: str) -> tuple[OutboxFlush, NeotomaError | None]:
        """Deliver ``lane``'s entries in order (the caller holds the lane); the error that
        stopped delivery, if a transient one did."""
        delivered = dead = 0
        while True:
            entry = await anyio.to_thread.run_sync(outbox.head, lane)
            if entry is None:
                return OutboxFlush(delivered=delivered, remaining=0, dead=dead), None
            try:
                await self.request(entry.action, entry.body)
            except NeotomaError as exc:
                transient = is_transient(exc)
                what = _describe(exc)
                await anyio.to_thread.run_sync(
                    functools.partial(outbox.failed, entry.id, what, dead=not transient)
                )
                if transient:
                    _log.warning(
                        "outbox.delivery_failed",
                        entry_id=entry.id,
                        idempotency_key=entry.idempotency_key,
                        error=what,
                    )
                    remaining = await anyio.to_thread.run_sync(outbox.count)
                    return OutboxFlush(delivered, remaining, dead, last_error=what), exc
                # Refused for good: kept (never dropped) but no longer holding the lane back.
                _log.error(
                    "outbox.dead",
                    entry_id=entry.id,
                    idempotency_key=entry.idempotency_key,
                    error=what,
                )
                dead += 1
                continue
            # Removed only now that the server confirmed it: a crash before this line
            # re-delivers, and the idempotency key makes that a replay.
            await anyio.to_thread.run_sync(outbox.remove, entry.id)
            delivered += 1
            _log.info(
                "outbox.delivered",
                entry_id=entry.id,
                idempotency_key=entry.idempotency_key,
                age_s=round(time.time() - entry.created_at, 3),
            )

    async def _deliver_all(self, outbox: Outbox) -> OutboxFlush:
        delivered = dead = 0
        last_error: str | None = None
        for lane in await anyio.to_thread.run_sync(outbox.lanes):
            async with self._lane(lane):
                done, _ = await self._drain(outbox, lane)
            delivered += done.delivered
            dead += done.dead
            last_error = done.last_error or last_error
        remaining = await anyio.to_thread.run_sync(outbox.count)
        return OutboxFlush(delivered, remaining, dead, last_error=last_error)

    async def _deliver_forever(self, outbox: Outbox) -> None:
        """The background delivery: poll while idle, back off while the server is down."""
        failures = 0
        while self._state is not _State.CLOSED:
            try:
                done = await self._deliver_all(outbox)
            except Exception as exc:  # never let the task die silently
                _log.warning("outbox.delivery_error", error=type(exc).__name__)
                done = OutboxFlush(0, 1, 0, last_error=type(exc).__name__)
            if done.last_error is not None:
                failures += 1
                # Full jitter over an exponential wait, so many clients do not return together.
                wait = random.uniform(0.5, 1.0) * min(
                    60.0, self._outbox_poll * 2 ** min(failures - 1, 16)
                )
            else:
                failures = 0
                wait = self._outbox_poll
            assert self._wake is not None
            self._wake.clear()
            if done.last_error is None:
                # Idle: wake early when this process queues something.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            else:
                await asyncio.sleep(wait)

    async def request(self, action: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST a raw REST body to ``/{action}`` (with retries); the decoded JSON answer."""
        return await self._call(f"/{action}", body)

    async def get_route(self, path: str, query: Mapping[str, Any]) -> Mapping[str, Any]:
        """``GET {path}?{query}`` (with retries: a read); the decoded JSON answer."""
        encoded = urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        return await self._call(f"{path}?{encoded}" if encoded else path, None, "GET")

    async def health(self) -> Mapping[str, Any]:
        """``GET /health`` once (no retries): the server's answer, ``{"ok": true, ...}``.

        Tells a Neotoma server from anything else listening at ``base_url``: an answer that
        is not a JSON object with a boolean ``ok`` raises :class:`ServerError` ("not a
        Neotoma server"); an error status raises as any request does, and an unreachable
        server raises :class:`TransportError`.
        """
        answer = await self._attempt(
            self._session_for_loop(), "/health", b"", self._timeout, method="GET"
        )
        status, body = answer.status, answer.body
        if 200 <= status < 300 and isinstance(body, Mapping) and isinstance(body.get("ok"), bool):
            return body
        if not 200 <= status < 300 and isinstance(body, Mapping):
            raise error_from_response(status, body, answer.headers)
        raise ServerError(
            f"GET /health: {self._base_url} does not answer as a Neotoma server "
            f"(status {status}, {type(body).__name__} body)",
            status=status,
        )

    def warm(self, connections: int = 1) -> None:
        """Open (or refresh) ``connections`` keep-alive connections, in the background.

        For a turn that is coming (the user starts typing), so that it pays no handshake:
        returns at once, never raises for the server's sake, never delays a request, ends
        with :meth:`aclose`, does nothing once closed. Costs ``connections`` requests per
        call (at most half of ``max_connections``; a call within a second of one at least as
        large sends nothing) and none while idle. See the README, "Connections between turns".
        """
        count = Warmer.size(connections, self._max_connections)
        if self._state is not _State.CLOSED:
            self._warmer.start(self._session_for_loop(), self._base_url + "/health", count)

    # --- plumbing ---------------------------------------------------------------------

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._state is _State.CLOSED:
            raise RuntimeError("HttpTransport is closed; create a new one")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "HttpTransport runs on asyncio only (it is built on aiohttp); "
                "use EmbeddedStore under trio"
            ) from None
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            headers = {
                "Accept": "application/json",
                "User-Agent": f"neotoma-agent/{__version__}",
            }
            self._session = aiohttp.ClientSession(
                connector=connector, headers=headers, raise_for_status=False
            )
            self._loop = loop
            self._state = _State.OPEN
        elif self._loop is not loop:
            raise RuntimeError(
                "HttpTransport is bound to the event loop it first ran on; "
                "create one transport per event loop"
            )
        return self._session

    async def _call(
        self, path: str, body: Mapping[str, Any] | None, method: str = "POST"
    ) -> Mapping[str, Any]:
        """POST ``body`` to ``path`` (or GET it, with no body) with retries; the decoded JSON
        object of a 2xx answer."""
        session = self._session_for_loop()
        payload = (
            b""
            if body is None
            else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        )
        policy = self._retry
        deadline = time.monotonic() + policy.timeout
        attempt = 1
        while True:
            budget = min(self._timeout, deadline - time.monotonic())
            retry_after: float | None = None
            try:
                answer = await self._attempt(session, path, payload, budget, method)
            except TransportError as exc:
                error: NeotomaError = exc
            else:
                if 200 <= answer.status < 300:
                    if isinstance(answer.body, Mapping):
                        return answer.body
                    raise ServerError(
                        f"{method} {path}: expected a JSON object, "
                        f"got {type(answer.body).__name__}",
                        status=answer.status,
                        body={"text": str(answer.body)[:2000]},
                    )
                error = error_from_response(answer.status, answer.body, answer.headers)
                retry_after = parse_retry_after(answer.headers.get("Retry-After"))
            if not is_transient(error) or attempt >= policy.attempts:
                raise error
            wait = policy.wait(attempt, retry_after)
            if time.monotonic() + wait >= deadline:
                # Waiting would overrun the call's time bound: give up now, with the error
                # (a 429 keeps its retry_after) rather than a timeout that hides it.
                raise error
            _log.warning(
                "transport.retry",
                method=method,
                path=path,
                attempt=attempt,
                max_attempts=policy.attempts,
                wait_s=round(wait, 3),
                error=type(error).__name__,
                status=error.status if isinstance(error, APIError) else None,
                code=error.code if isinstance(error, APIError) else None,
            )
            if wait > 0:
                await asyncio.sleep(wait)
            attempt += 1

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        path: str,
        payload: bytes,
        budget: float,
        method: str = "POST",
    ) -> _Answer:
        if budget <= 0:
            raise ReadTimeout(f"{method} {path}: no time left within the retry policy's timeout")
        timeout = aiohttp.ClientTimeout(
            total=budget, sock_connect=min(self._connect_timeout, budget)
        )
        headers = {"Content-Type": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        url = self._base_url + path
        # aiohttp warns (ResourceWarning) when sending raw bytes over 1 MiB, as a reminder to
        # stream them; a message may be that long, so large bodies go as a fresh stream.
        data: bytes | io.BytesIO = payload if len(payload) < _STREAM_ABOVE else io.BytesIO(payload)
        try:
            async with session.request(
                method,
                url,
                data=data if method == "POST" else None,
                headers=headers,
                timeout=timeout,
            ) as resp:
                raw = await resp.read()
                status = resp.status
                resp_headers = resp.headers  # case-insensitive, as HTTP headers are
                content_type = resp.content_type
        except aiohttp.ConnectionTimeoutError as exc:
            raise ConnectTimeout(
                f"{method} {path}: no connection to {self._base_url} "
                f"within {self._connect_timeout:g}s"
            ) from exc
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise ReadTimeout(f"{method} {path}: no answer within {budget:.3g}s") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ConnectionLost(
                f"{method} {path}: cannot connect to {self._base_url} ({exc.strerror or 'refused'})"
            ) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise ConnectionLost(
                f"{method} {path}: connection to {self._base_url} lost ({type(exc).__name__})"
            ) from exc
        return _Answer(status=status, headers=resp_headers, body=_decode(raw, content_type))


async def flush_outbox(
    outbox: str | os.PathLike[str],
    base_url: str = "http://127.0.0.1:3080",
    token: str | None = None,
    *,
    retry: RetryPolicy | None = None,
) -> OutboxFlush:
    """Deliver the outbox file at ``outbox`` to the server at ``base_url`` now (asyncio).

    What ``neotoma-agent outbox flush`` runs: an :class:`HttpTransport` over that outbox,
    one :meth:`HttpTransport.flush_outbox`, closed. Raises :class:`FileNotFoundError` if
    there is no such file (a flush never creates one).
    """
    if not await anyio.Path(outbox).exists():
        raise FileNotFoundError(f"no outbox file at {os.fspath(outbox)}")
    async with HttpTransport(
        base_url, token, retry=retry, outbox=outbox, outbox_background=False
    ) as transport:
        return await transport.flush_outbox()


def _decode(raw: bytes, content_type: str) -> object:
    text = raw.decode("utf-8", errors="replace")
    # Trust the bytes over the header: the server labels its 429 text/html, and a proxy
    # may label JSON as text.
    if "json" in content_type or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _describe(error: NeotomaError) -> str:
    """An error by class, status and code: never its message (it may quote content)."""
    if isinstance(error, APIError):
        return f"{type(error).__name__} {error.status}" + (f" {error.code}" if error.code else "")
    return type(error).__name__
