"""What HttpTransport accepts of an answer: its size, its nesting, where it comes from.

A server (or whatever answers at its address) may be hostile or broken. Its answer is read
in chunks up to ``max_response_size`` bytes, a ``Content-Length`` above that refused before
anything is read; JSON nested deeper than Python's parser can follow, and a redirect, are
refused too. Each is a typed error, never a ``MemoryError`` or ``RecursionError``:

- too large or too deep: :class:`~neotoma_agent.ServerError` with status 502 (the answer
  could not be used, as a gateway says of a bad upstream answer), so it is retried and an
  outbox queues a closing store as for any other server failure;
- a redirect (3xx): :class:`~neotoma_agent.APIError` with the status, never followed: a
  write re-sent to another origin would carry the conversation there, and a read
  followed would send the token. Not retried: the same request gets the same redirect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..exceptions import APIError, ServerError

if TYPE_CHECKING:  # the embedded store's answers use too_deep: no aiohttp for them
    import aiohttp

__all__ = [
    "CODE_REDIRECT",
    "CODE_TOO_DEEP",
    "CODE_TOO_LARGE",
    "DEFAULT_MAX_RESPONSE_SIZE",
    "read_capped",
    "redirect_refused",
    "too_deep",
]

#: the largest answer HttpTransport reads, bytes (64 MiB: a history page of long turns is
#: a few MiB)
DEFAULT_MAX_RESPONSE_SIZE: Final = 64 * 1024 * 1024
#: the error codes these refusals carry
CODE_TOO_LARGE: Final = "ERR_RESPONSE_TOO_LARGE"
CODE_TOO_DEEP: Final = "ERR_RESPONSE_TOO_DEEP"
CODE_REDIRECT: Final = "ERR_REDIRECT_NOT_FOLLOWED"
# The status given to an answer that could not be used (502 Bad Gateway).
_UNUSABLE: Final = 502
_CHUNK: Final = 64 * 1024


def _too_large(what: str, cap: int, status: int) -> ServerError:
    return ServerError(
        f"{what}: the answer ({status}) is larger than max_response_size ({cap:,} bytes); not read",
        status=_UNUSABLE,
        code=CODE_TOO_LARGE,
    )


async def read_capped(resp: aiohttp.ClientResponse, cap: int, what: str) -> bytes:
    """The body of ``resp``, read in chunks; :class:`ServerError` past ``cap`` bytes (or
    at once when ``Content-Length`` announces more), the connection closed."""
    length = resp.content_length
    if length is not None and length > cap:
        resp.close()
        raise _too_large(what, cap, resp.status)
    chunks: list[bytes] = []
    total = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        total += len(chunk)
        if total > cap:
            chunks.clear()
            resp.close()
            raise _too_large(what, cap, resp.status)
        chunks.append(chunk)
    return b"".join(chunks)


def too_deep(what: str, status: int) -> ServerError:
    """The error for an answer whose JSON nests deeper than the parser can follow."""
    return ServerError(
        f"{what}: the answer ({status}) is JSON nested too deep to decode",
        status=_UNUSABLE,
        code=CODE_TOO_DEEP,
    )


def redirect_refused(what: str, status: int) -> APIError:
    """The error for a 3xx answer (never followed)."""
    return APIError(
        f"{what}: the server answered {status} (a redirect); redirects are not followed: "
        "pass the server's own URL",
        status=status,
        code=CODE_REDIRECT,
    )
