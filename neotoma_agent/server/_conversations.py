"""The dev server's ``GET /recent_conversations`` and ``GET /recent_conversations/{id}``.

Same shapes as a real server (recordings m1–m4); the store's answer is sent as it is. Query
values arrive as text: integers are parsed here and a bad one is refused with the store's
400. ``limit`` / ``before`` on the single conversation are the extension the embedded store
honours (see :mod:`neotoma_agent.transport.embedded._conversations`), and so is
``GET /conversation_summaries`` (the store's per-conversation summary, keyset-paged by
``after``; see :mod:`neotoma_agent.transport.embedded._summaries`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from neotoma_agent import ConversationReader, SummaryReader
from neotoma_agent.server._replies import json_response, refusal
from neotoma_agent.server._routes import Handler, store_of

__all__ = ["CONVERSATION_ROUTES"]


def _reader(request: web.Request) -> ConversationReader:
    store = store_of(request)
    if not isinstance(store, ConversationReader):
        raise refusal(501, "NOT_IMPLEMENTED", "this store cannot list conversations")
    return store


def _int(request: web.Request, name: str, default: int | None) -> int | None:
    value = request.query.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise refusal(
            400,
            "VALIDATION_INVALID_FORMAT",
            f"Invalid request payload: {name} must be an integer",
            {
                "issues": [
                    {"code": "custom", "message": f"{name} must be an integer", "path": [name]}
                ]
            },
        ) from None


async def _get_conversations(request: web.Request) -> web.StreamResponse:
    page = await _reader(request).recent_conversations(
        limit=_int(request, "limit", 25) or 0,
        offset=_int(request, "offset", 0) or 0,
        activity_after=request.query.get("activity_after"),
        activity_before=request.query.get("activity_before"),
    )
    return json_response(page.raw)


async def _get_conversation(request: web.Request) -> web.StreamResponse:
    answer: Any = await _reader(request).recent_conversation(
        request.match_info["entity_id"],
        limit=_int(request, "limit", None),
        before=request.query.get("before"),
    )
    return json_response(answer.raw)


async def _get_summaries(request: web.Request) -> web.StreamResponse:
    store = store_of(request)
    if not isinstance(store, SummaryReader):
        raise refusal(501, "NOT_IMPLEMENTED", "this store keeps no conversation summaries")
    page = await store.conversation_summaries(
        limit=_int(request, "limit", 25) or 0, after=request.query.get("after")
    )
    return json_response(page.raw)


#: the conversation routes, by path (aiohttp patterns)
CONVERSATION_ROUTES: dict[str, Handler] = {
    "/recent_conversations": _get_conversations,
    "/recent_conversations/{entity_id}": _get_conversation,
    "/conversation_summaries": _get_summaries,
}
