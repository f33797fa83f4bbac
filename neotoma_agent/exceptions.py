"""The errors neotoma-agent raises.

Every error this library raises on purpose derives from :class:`NeotomaError`::

    NeotomaError
    ├── TransportError                 the request may not have reached the store
    │   ├── ConnectTimeout             no connection within connect_timeout
    │   ├── ReadTimeout                connected, but no answer within timeout
    │   └── ConnectionLost             refused, reset or dropped mid-request
    ├── APIError(status, code, message, body)   the store answered and refused
    │   ├── AuthenticationError        401 / 403: missing, invalid or forbidden token
    │   ├── ValidationError            400: the request is malformed or unresolvable
    │   ├── IdempotencyMismatchError   400 / 409: key reused with different entities
    │   ├── NotFoundError              404: no such entity or route
    │   ├── RateLimitedError           429: slow down (retry_after seconds, if known)
    │   └── ServerError                5xx: the store failed
    ├── TurnStateError                 a Turn used out of order (entered twice, closed)
    ├── TurnCloseError                 the closing store of a turn failed
    ├── ToolCallConflictError          a tool call id recorded again with other content
    ├── EmptySearchQueryError          a search for an empty or blank query
    ├── InvalidEntityIdError           an entity id that is not ``ent_`` + 24 hex digits
    ├── InvalidUserIdError             a user id that is not a short, printable string
    └── OutboxError                    the outbox file cannot be used (a newer schema)
        └── OutboxFullError            the outbox holds its maximum of entries

One warning, :class:`UndeclaredFieldWarning` (a ``UserWarning``): an entity given fields
its type does not declare, which a store keeps off the entity's snapshot.

``TransportError`` and ``RateLimitedError`` / ``ServerError`` are the transient kinds that a
transport may retry (a store carries an idempotency key, so its retry is safe). Error messages
never carry bearer tokens or message content.

:func:`error_class_name` is the name a turn records for any exception (a turn's or a tool
call's ``error_class``); :func:`error_label` names one safely in a log line or a report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "APIError",
    "AuthenticationError",
    "ConnectTimeout",
    "ConnectionLost",
    "EmptySearchQueryError",
    "IdempotencyMismatchError",
    "InvalidEntityIdError",
    "InvalidUserIdError",
    "NeotomaError",
    "NotFoundError",
    "OutboxError",
    "OutboxFullError",
    "RateLimitedError",
    "ReadTimeout",
    "ServerError",
    "ToolCallConflictError",
    "TransportError",
    "TurnCloseError",
    "TurnStateError",
    "UndeclaredFieldWarning",
    "ValidationError",
    "error_class_name",
    "error_label",
]


def error_class_name(exc: BaseException) -> str:
    """The name a turn records for ``exc``'s class: ``ValueError`` for a builtin, else
    ``module.QualName`` (``asyncio.exceptions.CancelledError``, ``myapp.errors.Refused``).

    It is what ``TurnResult.error_class``, a stored turn record's ``error_class`` and
    ``ToolCall.error_class`` hold when the library names the exception itself; pass it as
    ``record_tool(..., error_class=error_class_name(exc))`` for a call a framework ran, so
    that the names read alike. Only the class is named, never the exception's text.
    """
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def error_label(exc: BaseException) -> str:
    """How to name ``exc`` in a log line, a report or a problem shown to a user:
    ``"ServerError 500 ERR_STORE_FAILED"``, ``"ConnectionLost"``, ``"KeyError"``.

    By class, and for an error the store answered with (:class:`APIError`), its status and
    code: never the error's message. A server's message is whatever the server sent (a
    hostile or echoing one puts anything there: content, a terminal escape, a forged log
    line), and an exception raised by application code may quote the text it was handling.
    The library's own log events, outbox entries and hooks name errors this way.
    """
    if isinstance(exc, APIError):
        return f"{type(exc).__name__} {exc.status}" + (f" {exc.code}" if exc.code else "")
    return type(exc).__name__


class NeotomaError(Exception):
    """Base class of every error raised by neotoma-agent."""


class TransportError(NeotomaError):
    """The request failed in transit; the store may or may not have applied it."""


class ConnectTimeout(TransportError):
    """No connection could be made within the connect timeout."""


class ReadTimeout(TransportError):
    """The store did not answer within the request timeout."""


class ConnectionLost(TransportError):
    """The connection was refused, reset or closed before a full answer arrived."""


class APIError(NeotomaError):
    """The store answered with an error.

    ``status`` is the HTTP status (the embedded store uses the status a server would send),
    ``code`` the Neotoma error code (``ERR_...`` or ``VALIDATION_...``), ``message`` its
    human-readable message and ``body`` the whole decoded error body.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        body: Mapping[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body: Mapping[str, Any] = body if body is not None else {}
        self.hint = hint

    @property
    def retryable(self) -> bool:
        """True when the store said the same request may succeed later."""
        err = self.body.get("error")
        if isinstance(err, Mapping) and err.get("retryable") is True:
            return True
        details = self.body.get("details")
        return isinstance(details, Mapping) and details.get("retryable") is True

    def __str__(self) -> str:
        head = f"[{self.status}{' ' + self.code if self.code else ''}] {self.message}"
        return f"{head} (hint: {self.hint})" if self.hint else head

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r})"


class AuthenticationError(APIError):
    """The store refused the credentials (401) or the access (403)."""


class ValidationError(APIError):
    """The request was refused as invalid; nothing was written."""


class IdempotencyMismatchError(APIError):
    """An idempotency key was reused with different entities.

    For a turn this means the same ``turn_id`` was run again with a different text: pass a
    new ``turn_id``, or ``revision=`` to record a regenerated reply.
    """


class NotFoundError(APIError):
    """No such entity (or no such route)."""


class RateLimitedError(APIError):
    """The store asked the client to slow down (429)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ServerError(APIError):
    """The store failed while handling the request (5xx)."""


class TurnStateError(NeotomaError):
    """A turn was used out of order: entered twice, or changed after it closed."""


class TurnCloseError(NeotomaError):
    """The closing store of a turn failed; the cause is chained as ``__cause__``."""


class ToolCallConflictError(NeotomaError, ValueError):
    """A tool call id was recorded again in the same turn with different content.

    A call id (a framework's ``tool_use_id``) names one call: recording it again with the
    same content is a no-op, with other content it is refused, before any I/O. Also a
    ``ValueError``, as the other refusals of bad input are.
    """


class EmptySearchQueryError(NeotomaError, ValueError):
    """A search was given an empty or blank query (nothing to look for).

    Raised before any I/O. Any other text is a valid query, even one that holds no word
    (``"***"``: it finds nothing). Also a ``ValueError``, as the other refusals of bad
    input are.
    """


class InvalidEntityIdError(NeotomaError, ValueError):
    """An entity id that is not Neotoma's ``ent_`` + 24 lowercase hex digits (or not a
    str), refused before any I/O. The message never quotes the id."""


class InvalidUserIdError(NeotomaError, ValueError):
    """A user id that cannot scope a store: not a str, empty, longer than 256 characters,
    holding a control character or a lone surrogate, or starting or ending with
    whitespace. Raised before any I/O; the message never quotes the id."""


class OutboxError(NeotomaError):
    """The outbox file cannot be used: its schema is newer than this library's."""


class OutboxFullError(OutboxError):
    """The outbox holds its configured maximum of entries; nothing more is queued.

    Raised rather than dropping an entry: the closing store then fails as it would without
    an outbox (``TurnCloseError``), loudly.
    """


class UndeclaredFieldWarning(UserWarning):
    """An entity was given fields its type does not declare (``remember`` and
    ``t.remember``).

    A store keeps such a field on the entity's observation but leaves it out of the
    snapshot, so retrieval and ``t.context()`` never see it, on every backend (a real
    Neotoma server does the same). The message names each field and, when one is close,
    the declared field it may have meant (``note`` -> ``notes``); never a value. Filter it
    as any warning: ``warnings.filterwarnings("ignore", category=UndeclaredFieldWarning)``.
    """

    #: the entity type, and each undeclared field with the declared one it may mean
    entity_type: str
    fields: tuple[tuple[str, str | None], ...]

    def __init__(self, entity_type: str, fields: tuple[tuple[str, str | None], ...]) -> None:
        self.entity_type = entity_type
        self.fields = fields
        named = ", ".join(
            repr(field) + (f" (did you mean {near!r}?)" if near else "") for field, near in fields
        )
        plural = "s" if len(fields) > 1 else ""
        super().__init__(
            f"{entity_type!r} does not declare the field{plural} {named}: kept on the "
            "observation but left out of the entity's snapshot, so retrieval and the context "
            "block never see it"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling replays __init__ with self.args, which is the message here.
        return (type(self), (self.entity_type, self.fields))
