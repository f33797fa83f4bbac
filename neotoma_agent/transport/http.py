"""HttpTransport: the Transport protocol over a real Neotoma server's REST routes.

Built on aiohttp, so it runs on **asyncio only** (the embedded store also runs on trio).

It parses what the server really sends rather than what its documentation idealises
(``tests/data/samples`` holds recorded answers): ``store`` answers are aligned to the request by
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

An outbox (closing stores that still fail transiently after their retries, kept in a file
and delivered later) is a transport of its own that wraps this one:
``OutboxTransport(HttpTransport(url), "outbox.db")`` (see :mod:`.outbox`).
:func:`flush_outbox` delivers an outbox file to a server now. The ``outbox=`` arguments of
0.2 still work, deprecated (a :class:`DeprecationWarning`), until 0.4.
"""

from __future__ import annotations

import asyncio
import enum
import io
import json
import os
import sys
import time
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import anyio
import attrs

from neotoma_agent._neotoma.js import compact_encoder
from neotoma_agent._records.checks import check_positive_int, check_seconds
from neotoma_agent._records.user_id import check_user_id, tenant_of
from neotoma_agent._util.log import get_logger
from neotoma_agent._util.otel import record_retry, traceparent_into
from neotoma_agent._version import __version__
from neotoma_agent.exceptions import (
    APIError,
    ConnectionLost,
    ConnectTimeout,
    InvalidUserIdError,
    NeotomaError,
    NotFoundError,
    ReadTimeout,
    ServerError,
    TransportError,
)
from neotoma_agent.transport._base import RecentConversation, StoreResult
from neotoma_agent.transport._bodies import ConversationWindow, StoreOptions

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack
from neotoma_agent.transport._lazy_json import STORE_TAIL, TOOL_CALLS_TAIL, decode_object
from neotoma_agent.transport._limits import (
    DEFAULT_MAX_RESPONSE_SIZE,
    read_capped,
    redirect_refused,
    too_deep,
)
from neotoma_agent.transport._outbox import DEFAULT_MAX_ENTRIES, OutboxFlush
from neotoma_agent.transport._rest import RestActions
from neotoma_agent.transport._retry import RetryPolicy, is_transient
from neotoma_agent.transport._search_fallback import search_without_index
from neotoma_agent.transport._search_results import SearchResult
from neotoma_agent.transport._spliced import encode_spliced
from neotoma_agent.transport._warm import Warmer
from neotoma_agent.transport._wire import error_from_response, parse_retry_after
from neotoma_agent.transport.outbox import OutboxTransport

__all__ = ["HttpTransport", "RetryPolicy", "flush_outbox", "tenant_scoped"]

_log = get_logger()
_loads = json.loads

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

    An answer is read in chunks up to ``max_response_size`` bytes (64 MiB by default); a
    larger one (or a ``Content-Length`` announcing one, refused before reading) raises
    :class:`~neotoma_agent.ServerError` with status 502 and code
    ``ERR_RESPONSE_TOO_LARGE``, as does JSON nested too deep to decode
    (``ERR_RESPONSE_TOO_DEEP``). Redirects are never followed: a 3xx answer raises
    :class:`~neotoma_agent.APIError` with its status and code ``ERR_REDIRECT_NOT_FOLLOWED``
    (a request re-sent elsewhere would carry the conversation and the token there). TLS
    certificates are verified (aiohttp's default, never turned off).

    ``user_id`` makes every request act for that user: it goes in each body (``POST``) and
    query (``GET``) as Neotoma reads it. A server honours it when the token may act for any
    user (an admin token; Neotoma's local dev user) or is that user's own token; any other
    token gets 403 (:class:`~neotoma_agent.AuthenticationError`). Checked with
    :func:`~neotoma_agent.check_user_id` (:class:`~neotoma_agent.InvalidUserIdError`);
    never in ``repr`` or log events. Without it, requests act for the token's user: one
    token per user is the way to scope a production server. ``tenant_scoped_ids=True`` says
    the server derives entity ids under the user (Neotoma's
    ``NEOTOMA_TENANT_SCOPED_ENTITY_IDS``, and ``neotoma-agent serve --users``): the ids this
    library computes (a conversation's, a message's) are then derived the same way
    (:attr:`tenant_id`); it needs ``user_id``. With a token and no ``user_id``, the
    transport asks the server once, before a turn (or :func:`neotoma_agent.reads.identify`)
    derives its first id, which user the token is (``GET /me``): on a server that says it
    derives ids under the user (``serve --users``), :attr:`tenant_id` becomes that user, so
    a token alone reads back what it stored.

    For an outbox, wrap it: ``OutboxTransport(HttpTransport(url), "outbox.db")`` (see
    :class:`~neotoma_agent.OutboxTransport`). ``outbox`` (a file path, with
    ``outbox_max_entries`` and ``outbox_poll``) is the deprecated 0.2 spelling of that
    wrapper, built into this transport: it warns (:class:`DeprecationWarning`) and goes in
    0.4.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:3080",
        token: str | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 32,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        retry: RetryPolicy | None = None,
        outbox: str | os.PathLike[str] | None = None,
        outbox_max_entries: int = DEFAULT_MAX_ENTRIES,
        outbox_poll: float = 5.0,
        user_id: str | None = None,
        tenant_scoped_ids: bool = False,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.username is not None or parsed.password is not None:
            # Credentials in the URL would leak into reprs and error messages.
            raise ValueError("base_url must not carry credentials; pass token= instead")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if token is not None and not token:
            raise ValueError("token must be a non-empty string or None")
        if user_id is not None:
            check_user_id(user_id)
        if tenant_scoped_ids and user_id is None:
            raise ValueError(
                "tenant_scoped_ids=True derives entity ids from the user: pass user_id= "
                "(the token's user when the token is one user's)"
            )
        check_seconds(timeout, "timeout")
        check_seconds(connect_timeout, "connect_timeout")
        check_positive_int(max_connections, "max_connections")
        check_positive_int(max_response_size, "max_response_size")
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._user_id = user_id
        self._tenant_id = user_id if tenant_scoped_ids else None
        # A token may be one user's on a server that derives ids under its user: until
        # the server said who (_identify), the ids are derived unscoped.
        self._identified = token is None or user_id is not None
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._max_connections = max_connections
        self._max_response_size = max_response_size
        self._retry = retry if retry is not None else RetryPolicy()
        self._state = _State.IDLE
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._warmer = Warmer()
        self._outbox: OutboxTransport | None = None
        if outbox is not None:
            warnings.warn(
                "HttpTransport(outbox=...) is deprecated and goes in 0.4: wrap the transport, "
                "OutboxTransport(HttpTransport(url), path, max_entries=..., poll=...)",
                DeprecationWarning,
                stacklevel=2,
            )
            self._outbox = OutboxTransport(
                _Unqueued(self), outbox, max_entries=outbox_max_entries, poll=outbox_poll
            )

    @property
    def base_url(self) -> str:
        """The server root this transport talks to."""
        return self._base_url

    @property
    def user_id(self) -> str | None:
        """The user every request acts for (sent as ``user_id``), or ``None``: the token's."""
        return self._user_id

    @property
    def tenant_id(self) -> str | None:
        """The user entity ids are derived under: ``user_id`` with ``tenant_scoped_ids=True``
        (a server that salts its ids with the user), else ``None`` (ids ignore the user)."""
        return self._tenant_id

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in force."""
        return self._retry

    @property
    def outbox(self) -> str | None:
        """The outbox file's path given as ``outbox=``, or ``None`` (deprecated with
        ``outbox=``, and warns: an :class:`~neotoma_agent.OutboxTransport` has ``path``)."""
        warnings.warn(
            "HttpTransport.outbox is deprecated and goes in 0.4 with outbox=: "
            "read path on the OutboxTransport that wraps the transport",
            DeprecationWarning,
            stacklevel=2,
        )
        return None if self._outbox is None else self._outbox.path

    def __repr__(self) -> str:
        token = "'***'" if self._token is not None else "None"
        outbox = "" if self._outbox is None else f", outbox={self._outbox.path!r}"
        # The user id is personal data: a repr lands in logs and tracebacks.
        user = "" if self._user_id is None else ", user_id='***'"
        return (
            f"HttpTransport(base_url={self._base_url!r}, token={token}{user}{outbox}, "
            f"state={self._state.value!r})"
        )

    async def __aenter__(self) -> HttpTransport:
        if self._state is _State.CLOSED:
            raise RuntimeError("HttpTransport is closed; create a new one")
        if self._outbox is not None:
            self._session_for_loop()  # refuses another event loop, as requests do
            # Opening the outbox starts delivering what an earlier run left queued.
            await self._outbox.__aenter__()
        return self

    # __aexit__ (close) comes from AsyncClosing.

    async def aclose(self) -> None:
        """Close the connection pool (and the outbox); idempotent. No reopening.

        Entries still queued stay in the outbox file for the next open.
        """
        self._state = _State.CLOSED
        if self._outbox is not None:
            await self._outbox.aclose()  # its delivery first: it sends through the session
        await self._warmer.aclose()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def store(
        self, entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
    ) -> StoreResult:
        """``POST /store`` (through the outbox of the deprecated ``outbox=``, if given)."""
        send = super().store if self._outbox is None else self._outbox.store
        return await send(entities, **options)

    async def recent_conversation(
        self, conversation_entity_id: str, **window: Unpack[ConversationWindow]
    ) -> RecentConversation:
        """``GET /recent_conversations/{entity_id}`` (with the deprecated ``outbox=``, once the
        stores it queued for that conversation are delivered)."""
        if self._outbox is not None:
            await self._outbox.deliver_conversation(conversation_entity_id)
        return await super().recent_conversation(conversation_entity_id, **window)

    async def flush_outbox(self) -> OutboxFlush:
        """Deliver every entry the deprecated ``outbox=`` queued now; without one there is
        nothing to do. Deprecated with ``outbox=`` (it warns): wrap the transport in an
        :class:`~neotoma_agent.OutboxTransport` and call its
        :meth:`~neotoma_agent.OutboxTransport.flush`."""
        warnings.warn(
            "HttpTransport.flush_outbox() is deprecated and goes in 0.4 with outbox=: "
            "call flush() on the OutboxTransport that wraps the transport",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._outbox is None:
            return OutboxFlush(delivered=0, remaining=0, dead=0)
        return await self._outbox.flush()

    async def request(self, action: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST a raw REST body to ``/{action}`` (with retries); the decoded JSON answer.

        With ``user_id``, the body carries it (in place of any ``user_id`` it had)."""
        if self._user_id is not None:
            body = {**body, "user_id": self._user_id}
        return await self._call(f"/{action}", body)

    async def search(
        self, query: str, *, limit: int = 10, conversation_id: str | None = None
    ) -> SearchResult:
        """``POST /text_search`` (the dev server's full-text index); from a real Neotoma
        server, which answers it 404, the search runs over its own reads instead (see
        :class:`~neotoma_agent.SearchReader` and the search guide for what that finds)."""
        try:
            return await super().search(query, limit=limit, conversation_id=conversation_id)
        except NotFoundError:
            return await search_without_index(
                self, query, limit=limit, conversation_id=conversation_id
            )

    async def get_route(self, path: str, query: Mapping[str, Any]) -> Mapping[str, Any]:
        """``GET {path}?{query}`` (with retries: a read); the decoded JSON answer.

        With ``user_id``, the query carries it (in place of any ``user_id`` it had)."""
        if self._user_id is not None:
            query = {**query, "user_id": self._user_id}
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

    async def _identify(self) -> None:
        """Learn which user the token acts for, once (``GET /me``, a single attempt).

        On a server whose ``/me`` says it derives entity ids under the user
        (``tenant_scoped_ids``, as ``neotoma-agent serve`` does), :attr:`tenant_id` becomes
        that user's: the ids this side derives (a conversation's, for its history) are then
        the server's. A server without the route (404) or one that does not scope its ids
        leaves them unscoped. An unreachable server or another error leaves the question
        open for the next turn: the turn's own requests then fail, or queue, as they would.
        """
        if self._identified:
            return
        try:
            answer = await self._attempt(
                self._session_for_loop(), "/me", b"", self._timeout, method="GET"
            )
        except TransportError:
            return
        status, body = answer.status, answer.body
        if status in (404, 405):  # no such route: a server without users
            self._identified = True
            return
        if not 200 <= status < 300 or not isinstance(body, Mapping):
            return
        user_id = body.get("user_id")
        if body.get("tenant_scoped_ids") is True and isinstance(user_id, str):
            try:
                self._tenant_id = tenant_of(check_user_id(user_id))
            except InvalidUserIdError:
                return
        self._identified = True

    def warm(self, connections: int = 1) -> None:
        """Open (or refresh) ``connections`` keep-alive connections, in the background.

        For a turn that is coming (the user starts typing), so that it pays no handshake:
        returns at once, never raises for the server's sake, never delays a request, ends
        with :meth:`aclose`, does nothing once closed. Costs ``connections`` requests per
        call (at most half of ``max_connections``; a call within a second of one at least as
        large sends nothing) and none while idle. See
        docs/transports/http.md, "Connections between turns".
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
        # What logs, spans and error messages name: the route without its query, which
        # may hold a user id or a search term.
        route = path.partition("?")[0]
        payload = b"" if body is None else encode_body(body)
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
                        f"{method} {route}: expected a JSON object, "
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
            # A retry is the transport doing its job (INFO); what it finally raises is the
            # caller's to report, so it is not logged here at all.
            _log.info(
                "transport.retry",
                method=method,
                path=route,
                attempt=attempt,
                max_attempts=policy.attempts,
                wait_s=round(wait, 3),
                error=type(error).__name__,
                status=error.status if isinstance(error, APIError) else None,
                code=error.code if isinstance(error, APIError) else None,
            )
            record_retry(method, route, attempt, type(error).__name__, wait)
            if wait > 0:
                await asyncio.sleep(wait)
            attempt += 1

    def _failure(self, request: str, exc: BaseException, budget: float) -> TransportError:
        """The exception tree's error for an aiohttp failure of ``request`` (``POST /store``)
        that had ``budget`` seconds."""
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return ConnectTimeout(
                f"{request}: no connection to {self._base_url} within {self._connect_timeout:g}s"
            )
        if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            return ReadTimeout(f"{request}: no answer within {budget:.3g}s")
        if isinstance(exc, aiohttp.ClientConnectorError):
            reason = exc.strerror or "refused"
            return ConnectionLost(f"{request}: cannot connect to {self._base_url} ({reason})")
        return ConnectionLost(
            f"{request}: connection to {self._base_url} lost ({type(exc).__name__})"
        )

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        path: str,
        payload: bytes,
        budget: float,
        method: str = "POST",
    ) -> _Answer:
        route = path.partition("?")[0]  # never the query (see _call)
        if budget <= 0:
            raise ReadTimeout(f"{method} {route}: no time left within the retry policy's timeout")
        timeout = aiohttp.ClientTimeout(
            total=budget, sock_connect=min(self._connect_timeout, budget)
        )
        headers = {"Content-Type": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        # The span this request belongs to, so a traced server's spans join the turn's trace.
        traceparent_into(headers)
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
                allow_redirects=False,
            ) as resp:
                raw = await read_capped(resp, self._max_response_size, f"{method} {route}")
                status = resp.status
                resp_headers = resp.headers  # case-insensitive, as HTTP headers are
                content_type = resp.content_type
        except (
            asyncio.TimeoutError,
            aiohttp.ClientConnectionError,
            aiohttp.ClientPayloadError,
        ) as exc:
            raise self._failure(f"{method} {route}", exc, budget) from exc
        if 300 <= status < 400:
            raise redirect_refused(f"{method} {route}", status)
        # A 2xx answer's seldom-read end is decoded when read (see _lazy_json).
        try:
            body = _decode(raw, content_type, path if 200 <= status < 300 else "", status)
        except RecursionError:
            if 200 <= status < 300:
                raise too_deep(f"{method} {route}", status) from None
            body = ""  # an error answer is typed by its status alone
        return _Answer(status=status, headers=resp_headers, body=body)


def tenant_scoped(health: Mapping[str, Any]) -> bool:
    """Whether a server's ``GET /health`` answer says it derives entity ids under the user
    (``"tenant_scoped_ids": true``: ``neotoma-agent serve``). A Neotoma server says nothing
    of it: its default is ids that ignore the user."""
    return health.get("tenant_scoped_ids") is True


class _Unqueued(RestActions):
    """An HttpTransport's own requests, for the outbox of the deprecated ``outbox=``: the
    outbox's inner transport, which must not go through that outbox again."""

    __slots__ = ("_http",)

    def __init__(self, http: HttpTransport) -> None:
        self._http = http

    async def request(self, action: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return await self._http.request(action, body)

    async def get_route(self, path: str, query: Mapping[str, Any]) -> Mapping[str, Any]:
        return await self._http.get_route(path, query)

    async def aclose(self) -> None:
        """Nothing: the HttpTransport closes itself."""


# Built once: json.dumps with options builds an encoder (and its cycle check's markers) per
# call. A body is acyclic but for a caller's mistake, whose RecursionError sends it through
# json.dumps, which raises what it always raised.
_encode_fast = compact_encoder(allow_nan=True, check_circular=False)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as the UTF-8 JSON a request sends: ``json.dumps(body, ensure_ascii=False,
    separators=(",", ":"))``, byte for byte, with its errors. Elements that kept their own
    JSON text (a closing store's tool calls: see ``_spliced``) are not encoded again."""
    try:
        text = encode_spliced(body, _encode_fast)
        return (_encode_fast(body) if text is None else text).encode()
    except RecursionError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _tail_key(path: str) -> str | None:
    # Where an answer's seldom-read part begins, by route (see _lazy_json).
    if path == "/store":
        return STORE_TAIL
    if path.startswith("/recent_conversations/"):
        return TOOL_CALLS_TAIL
    return None


def _decode(raw: bytes, content_type: str, path: str = "", status: int = 200) -> object:
    text = raw.decode("utf-8", errors="replace")
    # Trust the bytes over the header: the server labels its 429 text/html, and a proxy
    # may label JSON as text.
    if "json" in content_type or text.lstrip()[:1] in ("{", "["):
        try:
            tail_key = _tail_key(path)
            return _loads(text) if tail_key is None else decode_object(text, tail_key, status)
        except ValueError:
            return text
    return text


async def flush_outbox(
    outbox: str | os.PathLike[str],
    base_url: str = "http://127.0.0.1:3080",
    token: str | None = None,
    *,
    retry: RetryPolicy | None = None,
) -> OutboxFlush:
    """Deliver the outbox file at ``outbox`` to the Neotoma server at ``base_url`` now
    (asyncio: it is sent over an :class:`HttpTransport`).

    What ``neotoma-agent outbox flush --url`` runs: one :meth:`OutboxTransport.flush
    <neotoma_agent.OutboxTransport.flush>` over a new ``HttpTransport``, then closed. For
    another transport, ``async with OutboxTransport(inner, path, background=False) as t:
    await t.flush()``. Raises :class:`FileNotFoundError` if there is no such file (a flush
    never creates one).
    """
    if not await anyio.Path(outbox).exists():
        raise FileNotFoundError(f"no outbox file at {os.fspath(outbox)}")
    inner = HttpTransport(base_url, token, retry=retry)
    async with OutboxTransport(inner, outbox, background=False) as transport:
        return await transport.flush()
