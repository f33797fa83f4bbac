"""Whose rows an action reads and writes: the user scope of the store's thread.

Every row of the file belongs to one user, as on a Neotoma server: the ``uid`` column of
``entities``, ``idempotency_keys`` and ``conversation_summaries`` holds a small integer
that the ``users`` table maps to the user id (0, the local dev user, is in no row of it:
the unscoped store's own, and every row of a file written before users existed). Rows
hanging off an entity (observations, edges, name and search index entries, a
conversation's message list) belong to its entity's user.

An action runs on the store's thread as ``fn(conn, body)``; :func:`run_as` sets the user
around it, and the actions read it here (:func:`uid`, :func:`tenant`, :func:`owned`)
rather than from the body: a body comes from a client, the scope from the store object
the client was given. SQL reads the user's integer through the function ``current_uid()``
(:func:`install`): every statement stays one text for all users, which the planner
serves from an index led by ``uid``.
"""

from __future__ import annotations

import contextvars
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from ..._records.user_id import LOCAL_USER_ID

__all__ = [
    "NOBODY",
    "alone",
    "install",
    "lookup_uid",
    "owned",
    "run_as",
    "tenant",
    "uid",
    "user_id",
]

T = TypeVar("T")

#: The uid of a user the file has never stored anything for: no row has it.
NOBODY: Final = -1

_UID: contextvars.ContextVar[int] = contextvars.ContextVar("neotoma_uid", default=0)
_USER: contextvars.ContextVar[str] = contextvars.ContextVar("neotoma_user", default=LOCAL_USER_ID)


def uid() -> int:
    """The integer of the user the running action acts for (0: the local dev user)."""
    return _UID.get()


def user_id() -> str:
    """The id of the user the running action acts for."""
    return _USER.get()


def tenant() -> str | None:
    """The tenant entity ids are scoped to: None for the local dev user."""
    user = _USER.get()
    return None if user == LOCAL_USER_ID else user


def owned(alias: str = "", *, index: bool = False) -> str:
    """The SQL condition that a row (of ``alias``) is the running user's.

    By default a check on a row found otherwise (by its id): ``+e.uid = current_uid()``,
    which keeps
    the planner from walking the user's rows through an index led by ``uid`` instead of
    seeking the id. ``index=True`` (``uid = current_uid()``) is the lead of a scan of the
    user's rows:
    by type, by field value, by key, in a conversation list.
    """
    column = f"{alias}{'.' if alias else ''}uid"
    return f"{'' if index else '+'}{column} = current_uid()"


def install(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function :func:`owned` names: the running user's integer.

    A function, not the integer in the text: every user's statement is then the same
    text, which the connection prepares once (a text per user would crowd its cache of
    prepared statements and be prepared again on every turn of a store serving many
    users). Not deterministic (it changes between jobs), so SQLite calls it once per
    statement for an index seek and once per row for a check.
    """
    conn.create_function("current_uid", 0, _UID.get)


def alone(conn: sqlite3.Connection) -> bool:
    """True when every row of the file is the running user's: the local dev user of a file
    no other user has written to. A scan of an index that holds every user's rows (the
    full-text ones) checks each row's owner only when this is False."""
    return _UID.get() == 0 and conn.execute("SELECT 1 FROM users LIMIT 1").fetchone() is None


def lookup_uid(conn: sqlite3.Connection, user: str, *, create: bool) -> int:
    """The integer of ``user`` in this file; with ``create``, one is given to a new user,
    else a user the file has never seen is :data:`NOBODY`."""
    if user == LOCAL_USER_ID:
        return 0
    row = conn.execute("SELECT uid FROM users WHERE user_id = ?", (user,)).fetchone()
    if row is not None:
        return int(row[0])
    if not create:
        return NOBODY
    return int(
        conn.execute("INSERT INTO users (user_id) VALUES (?) RETURNING uid", (user,)).fetchone()[0]
    )


def run_as(
    user: str,
    fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T],
    conn: sqlite3.Connection,
    body: Mapping[str, Any],
    *,
    writes: bool,
) -> T:
    """``fn(conn, body)`` acting for ``user`` (a checked user id)."""
    uid_token = _UID.set(lookup_uid(conn, user, create=writes))
    user_token = _USER.set(user)
    try:
        return fn(conn, body)
    finally:
        _USER.reset(user_token)
        _UID.reset(uid_token)
