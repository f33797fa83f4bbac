"""User ids: the one check every scoped store, server and command applies to them.

A user id names whose memory a store reads and writes (``EmbeddedStore.for_user``, the
dev server's tokens, ``--user``). It is also what makes entity ids tenant-scoped: a user's
entities get ids whose basis is prefixed ``"tenant:<user_id>:"`` (Neotoma's tenant-scoped
ids), so the same company remembered by two users is two entities. The local dev user
(:data:`LOCAL_USER_ID`) is the unscoped store's own, and its ids ignore the user.
"""

from __future__ import annotations

import re
from typing import Final

from ..exceptions import InvalidUserIdError
from ..transport._wire import LOCAL_USER_ID

__all__ = [
    "LOCAL_USER_ID",
    "MAX_USER_ID_CHARS",
    "check_user_id",
    "identify",
    "tenant_for",
    "tenant_of",
]

#: The longest user id accepted: ids are keys, not documents.
MAX_USER_ID_CHARS: Final = 256

# C0, DEL and C1 controls, and lone surrogates (not storable as UTF-8).
_UNUSABLE: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_user_id(user_id: object) -> str:
    """Return ``user_id`` if it can scope a store, else raise :class:`InvalidUserIdError`.

    A user id is a str of 1 to 256 characters, without control characters or lone
    surrogates, not starting or ending with whitespace. The error never quotes the id
    (it may be an email address, or whatever a caller passed by mistake).
    """
    if not isinstance(user_id, str):
        raise InvalidUserIdError(f"a user id must be a str, not {type(user_id).__name__}")
    if not user_id:
        raise InvalidUserIdError("a user id must not be empty")
    if len(user_id) > MAX_USER_ID_CHARS:
        raise InvalidUserIdError(
            f"a user id must be at most {MAX_USER_ID_CHARS} characters, not {len(user_id)}"
        )
    if _UNUSABLE.search(user_id):
        raise InvalidUserIdError("a user id must not hold control characters or lone surrogates")
    if user_id != user_id.strip():
        raise InvalidUserIdError("a user id must not start or end with whitespace")
    return user_id


def tenant_of(user_id: str) -> str | None:
    """The tenant an entity id is scoped to for ``user_id``: None for the local dev user
    (ids ignore the user, as on a server without tenant-scoped ids), else the user id."""
    return None if user_id == LOCAL_USER_ID else user_id


def tenant_for(transport: object) -> str | None:
    """The tenant of the entity ids ``transport`` gives: its optional ``tenant_id``
    attribute (a transport without one, a third party's, gives unscoped ids)."""
    tenant = getattr(transport, "tenant_id", None)
    return tenant if isinstance(tenant, str) else None


async def identify(transport: object) -> None:
    """Let ``transport`` learn which user its token acts for, when it can (its optional
    ``_identify``: a token-only ``HttpTransport`` asks its server once), so that
    :func:`tenant_for` gives the server's tenant. Call it before deriving ids."""
    learn = getattr(transport, "_identify", None)
    if learn is not None:
        await learn()
