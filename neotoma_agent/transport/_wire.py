"""What travels on the wire between this library and a Neotoma server: the shared
vocabularies and the error envelopes, both ways.

Vocabularies (each written here once): :data:`LOCAL_USER_ID`, :data:`RELATIONSHIP_TYPES`,
:data:`OBSERVATION_SOURCES`, :data:`DIRECTIONS`.

Error envelopes:

A real Neotoma server answers errors in two JSON families and, outside its JSON handlers,
in plain text or an HTML page:

- flat ``{"error_code", "message", "details"?, "timestamp"}`` from most routes;
- nested ``{"error": {"code", "message", "issues"? , "hint"?, "retryable"?}}`` from ``/store``;
- an Express HTML page for malformed JSON (400) and unknown routes (404);
- a plain-text body with ``Retry-After`` for the write limiter's 429.

:func:`error_from_response` turns any of these into the :mod:`neotoma_agent.exceptions` tree
(the HTTP client); :func:`flat_envelope`, :func:`nested_envelope`, :func:`envelope_of` and
:func:`html_error_page` build them (the dev server), so both ends share one definition.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from ..exceptions import (
    APIError,
    AuthenticationError,
    IdempotencyMismatchError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    ValidationError,
)

__all__ = [
    "DIRECTIONS",
    "IDEMPOTENCY_CODES",
    "LOCAL_USER_ID",
    "OBSERVATION_SOURCES",
    "RELATIONSHIP_TYPES",
    "Direction",
    "envelope_of",
    "error_code",
    "error_from_response",
    "flat_envelope",
    "html_error_page",
    "nested_envelope",
    "parse_retry_after",
    "timestamp",
]

#: The user a local server (and the embedded store) writes as when no user is given.
LOCAL_USER_ID: Final = "00000000-0000-0000-0000-000000000000"

#: Neotoma's relationship types: closed and case-sensitive, as on the server.
RELATIONSHIP_TYPES: Final = frozenset(
    (
        "PART_OF CORRECTS REFERS_TO SETTLES DUPLICATE_OF DEPENDS_ON SUPERSEDES EMBEDS "
        "works_at owns manages part_of related_to depends_on references transacted_with "
        "member_of reports_to located_at created_by funded_by acquired_by subsidiary_of "
        "partner_of competitor_of supplies_to contracted_with invested_in"
    ).split()
)

#: The observation sources a store accepts, in the order the server's schema lists them.
OBSERVATION_SOURCES: Final = ("sensor", "llm_summary", "workflow_state", "human", "import", "sync")

#: Which edges of an entity a related-entities read follows.
Direction = Literal["inbound", "outbound", "both"]
DIRECTIONS: Final = get_args(Direction)

# A 409 collision is declared by the server but only its MCP transport emits it; both mean
# "this key was already used for other content" and need the same remedy.
IDEMPOTENCY_CODES = frozenset({"ERR_IDEMPOTENCY_MISMATCH", "ERR_IDEMPOTENCY_COLLISION"})

# Messages built from non-JSON bodies are cut short: an HTML page may carry a stack trace.
_MAX_TEXT_MESSAGE = 200


def timestamp(now: dt.datetime | None = None) -> str:
    """ISO 8601 UTC with milliseconds and ``Z``, as the server's JavaScript ``toISOString``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{now.microsecond // 1000:03d}Z"
    )


def _either(body: Mapping[str, Any], flat: str, nested: str) -> str | None:
    # The two envelope families: a flat field (`error_code`, `message`), or `error.{field}`.
    value = body.get(flat)
    if isinstance(value, str):
        return value
    err = body.get("error")
    if isinstance(err, Mapping) and isinstance(err.get(nested), str):
        return str(err[nested])
    return None


def error_code(body: Mapping[str, Any]) -> str | None:
    """The error code of either family: ``body.error_code ?? body.error.code``."""
    return _either(body, "error_code", "code")


def _message(body: Mapping[str, Any]) -> str | None:
    message = _either(body, "message", "message")
    err = body.get("error")
    if message is None and isinstance(err, str):  # some proxies answer {"error": "..."}
        return err
    return message


def _hint_text(value: object) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return str(value["text"])
    return None


def _hint(body: Mapping[str, Any]) -> str | None:
    err = body.get("error")
    if isinstance(err, Mapping):
        hint = _hint_text(err.get("hint"))
        if hint:
            return hint
        issues = err.get("issues")
        if isinstance(issues, list):
            for issue in issues:
                if isinstance(issue, Mapping) and (hint := _hint_text(issue.get("hint"))):
                    return hint
    details = body.get("details")
    if isinstance(details, Mapping):
        return _hint_text(details.get("hint"))
    return None


@functools.cache
def _page_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # An Express page's ``<pre>`` block, and any tag (compiled on first use, as ``html`` is
    # imported: only error pages need them).
    return re.compile(r"<pre>(.*?)</pre>", re.DOTALL | re.IGNORECASE), re.compile(r"<[^>]+>")


def _text_message(text: str) -> str:
    """The readable part of a non-JSON error body: an Express page's ``<pre>`` first line."""
    pre, tag = _page_patterns()
    match = pre.search(text)
    if match:
        text = match.group(1).split("<br>")[0]
    import html  # here, not at the top: only error pages need it (a fast start)

    text = html.unescape(tag.sub(" ", text))
    text = " ".join(text.split())
    if len(text) > _MAX_TEXT_MESSAGE:
        text = text[: _MAX_TEXT_MESSAGE - 1] + "…"
    return text


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        import email.utils  # here, not at the top: only HTTP dates need it (a fast start)

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        now = now or dt.datetime.now(dt.timezone.utc)
        seconds = (when - now).total_seconds()
    if seconds != seconds or seconds == float("inf"):  # NaN or inf: not a usable wait
        return None
    return max(0.0, seconds)


def error_from_response(
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
) -> APIError:
    """Map a non-2xx answer onto the error tree.

    ``body`` is the decoded JSON (a mapping) or the raw text of a non-JSON answer; the
    resulting error's ``.body`` is the mapping, or ``{"text": ...}`` for text.
    """
    headers = headers or {}
    if isinstance(body, Mapping):
        mapping: Mapping[str, Any] = body
        code = error_code(body)
        message = _message(body) or f"HTTP {status}"
        hint = _hint(body)
    else:
        text = body if isinstance(body, str) else ""
        mapping = {"text": text}
        code = None
        message = _text_message(text) or f"HTTP {status}"
        hint = None
    kw: dict[str, Any] = {"status": status, "code": code, "body": mapping, "hint": hint}
    if status in (401, 403):
        return AuthenticationError(message, **kw)
    if (code in IDEMPOTENCY_CODES) or status == 409:
        return IdempotencyMismatchError(message, **kw)
    if status == 429:
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        return RateLimitedError(message, retry_after=retry_after, **kw)
    if status == 404:
        return NotFoundError(message, **kw)
    if status >= 500:
        return ServerError(message, **kw)
    if status in (400, 413, 422):
        return ValidationError(message, **kw)
    return APIError(message, **kw)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, val in headers.items():
        if key.lower() == lowered:
            return val
    return None


# --- the server side --------------------------------------------------------------------


def flat_envelope(
    code: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The flat ``ErrorEnvelope`` most routes send (``sendError`` on the server)."""
    body: dict[str, Any] = {"error_code": code, "message": message}
    if details is not None:
        body["details"] = dict(details)
    body["timestamp"] = timestamp()
    return body


def nested_envelope(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The nested ``{"error": {...}}`` envelope ``/store`` sends for refused writes."""
    return {"error": {"code": code, "message": message, **extra}}


_DEFAULT_CODES = {
    400: "VALIDATION_ERROR",
    401: "AUTH_REQUIRED",
    403: "FORBIDDEN",
    404: "RESOURCE_NOT_FOUND",
    409: "ERR_IDEMPOTENCY_COLLISION",
    413: "PAYLOAD_TOO_LARGE",
    429: "RATE_LIMITED",
}


def envelope_of(exc: APIError) -> dict[str, Any]:
    """The body to send for ``exc``: the envelope it came with, else a flat one."""
    if exc.body and (error_code(exc.body) is not None):
        return dict(exc.body)
    code = exc.code or _DEFAULT_CODES.get(exc.status, "DB_QUERY_FAILED")
    return flat_envelope(code, exc.message)


_PAGE = (
    '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Error</title>\n'
    "</head>\n<body>\n<pre>{}</pre>\n</body>\n</html>\n"
)


def html_error_page(message: str) -> str:
    """The HTML page Express sends when no JSON handler answered (bad JSON, unknown route)."""
    import html

    return _PAGE.format(html.escape(message))
