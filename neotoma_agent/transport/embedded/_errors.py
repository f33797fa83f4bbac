"""Errors the embedded store raises, with the status and body a real server would send.

Two envelope families exist on a real server: a flat
``{error_code, message, details?, timestamp}`` and, on ``/store``, a nested
``{error: {code, message, issues? | hint?}}``. The embedded store builds the same bodies (with
:mod:`neotoma_agent._envelopes`, which the dev server and the HTTP client share) so the dev
server can pass them through and callers see identical errors on both transports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from ...exceptions import (
    APIError,
    IdempotencyMismatchError,
    NotFoundError,
    ValidationError,
)
from .._wire import flat_envelope, nested_envelope

__all__ = ["flat_error", "now_iso", "resolution_failed"]


def now_iso() -> str:
    """The current UTC time as the server writes it: ISO 8601 with milliseconds and ``Z``."""
    # The same text as _envelopes.timestamp in about half the time: every write stamps it.
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def flat_error(
    cls: type[APIError],
    status: int,
    code: str,
    message: str,
    details: Mapping[str, Any] | None = None,
) -> APIError:
    """An error in the flat envelope family."""
    return cls(message, status=status, code=code, body=flat_envelope(code, message, details))


def invalid_format(message: str, path: Sequence[str | int] = ()) -> APIError:
    """A 400 ``VALIDATION_INVALID_FORMAT`` with one issue, as a schema check would report."""
    return flat_error(
        ValidationError,
        400,
        "VALIDATION_INVALID_FORMAT",
        f"Invalid request payload: {message}",
        {"issues": [{"code": "custom", "message": message, "path": list(path)}]},
    )


def resolution_failed(message: str, issues: list[dict[str, Any]]) -> APIError:
    """A 400 ``ERR_STORE_RESOLUTION_FAILED`` (nested envelope) listing every issue."""
    # Codes and indexes only: an issue's own message can quote payload values (content).
    summary = "; ".join(
        f"{i.get('code')}"
        + (f" at entities[{i['observation_index']}]" if "observation_index" in i else "")
        for i in issues[:5]
    )
    body = nested_envelope("ERR_STORE_RESOLUTION_FAILED", message, issues=issues)
    return ValidationError(
        f"{message} ({summary})" if summary else message,
        status=400,
        code="ERR_STORE_RESOLUTION_FAILED",
        body=body,
    )


def idempotency_mismatch(key: str) -> APIError:
    message = (
        f'ERR_IDEMPOTENCY_MISMATCH: idempotency_key "{key}" was already used with different '
        "content. Use a new idempotency_key for a different payload."
    )
    hint = (
        "Each unique payload must use a unique idempotency_key. To update an entity, omit "
        "the idempotency_key or use a new one."
    )
    body = nested_envelope("ERR_IDEMPOTENCY_MISMATCH", message, hint=hint)
    return IdempotencyMismatchError(
        message, status=400, code="ERR_IDEMPOTENCY_MISMATCH", body=body, hint=hint
    )


def not_found(message: str = "Entity not found") -> APIError:
    return flat_error(NotFoundError, 404, "RESOURCE_NOT_FOUND", message)
