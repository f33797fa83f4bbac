"""Who a dev-server request acts for: its token's user, or any user for the admin token.

As on a Neotoma server, a request's user is its token's: each token of ``serve --users``
is bound to one user, whose rows alone that request reads and writes (the store's
:meth:`~neotoma_agent.EmbeddedStore.for_user` view). The server's own token (``--token``)
is the admin's: it acts for the default user
(:data:`~neotoma_agent.LOCAL_USER_ID`) and may name any other user with a body or query
``user_id``, as Neotoma's local dev user may. Any other token naming a user not its own is
refused with 403 ``FORBIDDEN``.

Tokens are compared without an early exit: the admin token in constant time, a user token
by the SHA-256 digest of what was offered (a lookup keyed by a digest tells a caller nothing
about the tokens' bytes).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from aiohttp import web

from neotoma_agent import LOCAL_USER_ID, Transport, check_user_id
from neotoma_agent.exceptions import InvalidUserIdError
from neotoma_agent.server._replies import refusal

__all__ = ["CALLER", "Caller", "Callers", "claim_user", "scoped_key", "store_for", "user_store"]


class Caller(NamedTuple):
    """Who sent a request: the user its token is bound to, and whether it is the admin's."""

    user_id: str
    admin: bool


if TYPE_CHECKING or hasattr(web, "RequestKey"):  # a newer aiohttp warns on str keys
    #: the request's :class:`Caller` (set by the authentication middleware)
    CALLER: Final = web.RequestKey("neotoma_caller", Caller)
    #: the user the request acts for, once decided (:func:`claim_user`)
    _ACTING: Final = web.RequestKey("neotoma_acting_user", str)
else:  # pragma: no cover - an aiohttp without RequestKey
    CALLER = "neotoma_caller"
    _ACTING = "neotoma_acting_user"


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class Callers:
    """The tokens a server accepts: ``admin`` (acts for any user) and ``users`` (token →
    user id, each acting for its user alone).

    :class:`ValueError` for an empty token, a user token equal to the admin's, or a user id
    :func:`~neotoma_agent.check_user_id` refuses (messages never quote a token).
    """

    __slots__ = ("_admin", "_users")

    def __init__(self, admin: str, users: Mapping[str, str] | None = None) -> None:
        if not isinstance(admin, str) or not admin:
            raise ValueError("token must be a non-empty string (e.g. secrets.token_urlsafe())")
        self._admin = admin.encode()
        self._users: dict[bytes, str] = {}
        for number, (token, user_id) in enumerate((users or {}).items(), start=1):
            if not isinstance(token, str) or not token:
                raise ValueError(f"user token {number} is empty")
            if token == admin:
                raise ValueError(f"user token {number} is the admin token")
            check_user_id(user_id)
            self._users[_digest(token.encode())] = user_id

    @property
    def scoped(self) -> bool:
        """Whether any token is bound to a user (``serve --users``)."""
        return bool(self._users)

    def match(self, offered: bytes) -> Caller | None:
        """The caller ``offered`` (a token's bytes, as sent) identifies, or ``None``."""
        user_id = self._users.get(_digest(offered))
        admin = hmac.compare_digest(offered, self._admin)
        if admin:
            return Caller(LOCAL_USER_ID, True)
        return None if user_id is None else Caller(user_id, False)


def claim_user(request: web.Request, claimed: Any) -> str:
    """The user ``request`` acts for, given the ``user_id`` it names (``None``: none).

    Its token's user when it names none or its own; another user only for the admin
    token (a user id that cannot be one: 400); else a 403 ``FORBIDDEN`` refusal.
    """
    caller: Caller = request.get(CALLER) or Caller(LOCAL_USER_ID, False)
    if claimed is None or claimed == caller.user_id:
        acting = caller.user_id
    elif not caller.admin:
        raise refusal(403, "FORBIDDEN", "user_id does not match the authenticated user")
    else:
        try:
            acting = check_user_id(claimed)
        except InvalidUserIdError:
            raise refusal(400, "VALIDATION_ERROR", "user_id is not a valid user id") from None
    request[_ACTING] = acting
    return acting


def store_for(store: Transport, user_id: str) -> Transport:
    """``store`` as ``user_id`` sees it: the store itself for the default user, else its
    :meth:`for_user` view (403 for a store that keeps one user only)."""
    if user_id == LOCAL_USER_ID:
        return store
    for_user = getattr(store, "for_user", None)
    if for_user is None:
        raise refusal(403, "FORBIDDEN", "user_id does not match the authenticated user")
    scoped: Transport = for_user(user_id)
    return scoped


def user_store(request: web.Request, store: Transport) -> Transport:
    """``store`` as the user ``request`` acts for sees it: the user a body named
    (:func:`claim_user`, run by ``read_body``), else the one its query names, else its
    token's."""
    acting = request.get(_ACTING)
    if acting is None:
        acting = claim_user(request, request.query.get("user_id"))
    return store_for(store, acting)


def scoped_key(name: str) -> Any:
    """A request key for a transport (a ``RequestKey`` where aiohttp has them)."""
    if hasattr(web, "RequestKey"):
        return web.RequestKey(name, Transport)
    return name  # pragma: no cover - an aiohttp without RequestKey
