"""EmbeddedStore: the store object, its lifecycle and its table of actions."""

from __future__ import annotations

import enum
import functools
import os
import sqlite3
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import attrs

from ..._records.user_id import LOCAL_USER_ID, check_user_id, tenant_of
from ..._util.file_kind import check_store_file, not_a_store
from .._base import LookupResult, StoreResult
from .._bodies import StoreOptions, store_body
from .._records import Entered
from .._rest import RestActions
from .._search_results import SEARCH_ACTION
from ._batch import replay_statuses, store_each
from ._bulk import FileReads
from ._connect import DEFAULT_BUSY_TIMEOUT
from ._connect import connect as _connect
from ._connect import encodable as _encodable
from ._conversations import READS as _CONVERSATION_READS
from ._conversations import route
from ._correct import correct
from ._db_thread import DBThread, Job
from ._delete import delete_entity, restore_entity
from ._edges import create_relationship, create_relationships, retrieve_related_entities
from ._forget_user import ForgottenUser, forget_user_rows, restore_user_rows
from ._get_reads import (
    get_entity,
    get_entity_observations,
    get_entity_relationships,
    get_relationship,
    get_relationships,
)
from ._history_page import forget as _forget_page_rows
from ._name_index import install as install_names
from ._read import (
    get_entity_snapshot,
    list_observations,
    query_entities,
    retrieve_entity_by_identifier,
)
from ._rows import install as install_rows
from ._schema import SCHEMA_VERSION
from ._scope import install as install_scope
from ._scope import run_as
from ._search import text_search
from ._turn_write import enter_records, lookup_each, store_answered, store_records
from ._write import store

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["EmbeddedStore", "UserStore"]

T = TypeVar("T")


class _State(enum.Enum):
    OPEN = "open"
    #: aclose has begun: no new work is taken while the thread finishes what is queued
    CLOSING = "closing"
    CLOSED = "closed"


def _connect_read_only(path: str) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            version = _readable_version(conn)
        except sqlite3.OperationalError:
            # A WAL file's readers need its -shm index, which a read-only directory cannot
            # hold: read the file as it is (no writer may run meanwhile, as with a copy).
            conn.close()
            conn = sqlite3.connect(
                f"{uri}&immutable=1", uri=True, isolation_level=None, check_same_thread=False
            )
            version = _readable_version(conn)
        except sqlite3.DatabaseError:
            conn.close()
            raise not_a_store(path, "not a SQLite database") from None
        try:
            kind = check_store_file(conn, path)
        except BaseException:
            conn.close()
            raise
        if kind == "empty":
            conn.close()
            raise sqlite3.OperationalError(f"{path} holds no store yet (an empty file)")
        if version != SCHEMA_VERSION:
            conn.close()
            raise sqlite3.OperationalError(
                f"the store file has schema version {version}, this release reads "
                f"{SCHEMA_VERSION}: open it once with write access to upgrade it"
                if version < SCHEMA_VERSION
                else f"the store file has schema version {version}, newer than this release "
                f"reads ({SCHEMA_VERSION}): upgrade neotoma-agent"
            )
        install_names(conn)  # a temporary table: before query_only
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -65536")
        install_scope(conn)
        install_rows(conn)
        return conn

    return connect


def _readable_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


class _Actions(RestActions):
    """The actions of a store and of its views, on top of ``_run`` (the store's thread)."""

    __slots__ = ()

    async def _run(
        self, fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T], body: Mapping[str, Any]
    ) -> T:
        raise NotImplementedError

    async def request(self, action: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Run one REST action (``"store"``, ``"entities/query"``, ...) on a raw body.

        Returns the server-shaped JSON; the dev server is built on this.
        """
        try:
            fn = _ACTIONS[action]
        except KeyError:
            raise ValueError(f"unknown action {action!r}") from None
        return await self._run(fn, body)

    async def get_route(self, path: str, query: Mapping[str, Any]) -> dict[str, Any]:
        """Run a read-only GET route (``/recent_conversations[/{id}]``) on typed query values."""
        fn, body = route(path, query)
        return await self._run(fn, body)

    async def store(
        self, entities: Sequence[Mapping[str, Any]], **options: Unpack[StoreOptions]
    ) -> StoreResult:
        """``POST /store``; entries come back aligned to ``entities``, fresh or replayed.

        ``lane`` and ``deferrable`` are hints for a queueing wrapper: a store ignores them.
        The body is the one ``request("store", ...)`` takes, and the answer the one it
        gives, parsed: made on the store's thread (its JSON, ``raw``, when first read).
        """
        return await self._run(store_answered, store_body(entities, **options))

    async def store_many(
        self, bodies: Sequence[Mapping[str, Any]]
    ) -> list[StoreResult | Exception]:
        """Run many ``store`` bodies (as built by ``store_body``) as one job, in order.

        Each keeps its own idempotency key and its own atomicity: one that is refused
        rolls back alone, and its error takes its place in the list; the others are
        committed together. See :mod:`._batch`.
        """
        raws = await self._run(
            functools.partial(store_each, functools.partial(_encodable, store)),
            {"stores": list(bodies)},
        )
        return [
            raw
            if isinstance(raw, Exception)
            else StoreResult.from_json(raw, request_entities=body["entities"])
            for raw, body in zip(raws, bodies, strict=True)
        ]

    async def _store_records(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]] = (),
    ) -> StoreResult:
        """``store`` of a turn's records as they are: no request body, no answer parsed
        (:mod:`neotoma_agent.transport._records`); what is stored is the same."""
        records = {
            "entities": entities,
            "idempotency_key": idempotency_key,
            "relationships": relationships,
        }
        return await self._run(store_records, records)

    async def _enter_records(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]],
        history: Mapping[str, Any] | None,
        lookups: Sequence[Mapping[str, Any]] | None,
        deadline: float | None,
    ) -> Entered:
        """A turn's enter as one job (:func:`~._turn_write.enter_records`):
        ``_store_records``, then the history page and the lookups, within ``deadline``
        (``time.monotonic()``)."""
        body = {
            "entities": entities,
            "idempotency_key": idempotency_key,
            "relationships": relationships,
            "history": history,
            "lookups": lookups,
            "deadline": deadline,
        }
        return await self._run(enter_records, body)

    async def retrieve_many(
        self, bodies: Sequence[Mapping[str, Any]]
    ) -> list[LookupResult | Exception]:
        """Run many ``retrieve_entity_by_identifier`` bodies as one job, in order: one
        turn's lookups cost one trip to the store's thread, not one each. Each answer, or
        the error its lookup raised, takes its place in the list."""
        raws = await self._run(lookup_each, {"lookups": list(bodies)})
        return [raw if isinstance(raw, Exception) else LookupResult.from_json(raw) for raw in raws]

    async def replay_status(self, bodies: Sequence[Mapping[str, Any]]) -> list[bool | None]:
        """Per store body: True if storing it would only replay, False if its key is stored
        with other entities, None if a store must decide (one read for them all)."""
        return await self._run(replay_statuses, {"stores": list(bodies)})


@attrs.define(init=False, repr=False)
class EmbeddedStore(_Actions):
    """A Neotoma-compatible store in one SQLite file (or ``":memory:"``).

    Open it with :meth:`open` and close it with :meth:`aclose` or ``async with``::

        async with EmbeddedStore.open("memory.db") as store:
            ...

    All SQLite work runs on one owning thread: concurrent callers never see "database is
    locked", and stores queued together are committed together. Works on asyncio and trio.
    """

    path: str
    read_only: bool
    _thread: DBThread
    _state: _State

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        read_only: bool = False,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    ) -> None:
        """Open (creating if needed) the store at ``path``.

        ``synchronous`` is SQLite's durability setting: ``NORMAL`` (the default, with WAL)
        survives a crash or kill of the process; ``FULL`` also survives a power cut.
        ``read_only=True`` opens an existing file for reading only (it works on a file or
        directory without write access, and never creates or upgrades anything); every
        write then raises :class:`PermissionError` before touching the file.
        ``busy_timeout`` is how many seconds a store waits for another process's write
        lock on the file (10 by default) before it fails with "database is locked".
        """
        if not busy_timeout >= 0 or busy_timeout == float("inf"):
            raise ValueError(f"busy_timeout must be a finite number >= 0, not {busy_timeout!r}")
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = os.fspath(path)
        if self.path != ":memory:" and not Path(self.path).parent.is_dir():
            raise FileNotFoundError(f"directory of store file does not exist: {self.path}")
        self.read_only = read_only
        if read_only and (self.path == ":memory:" or not Path(self.path).is_file()):
            raise FileNotFoundError(f"no store file to open read-only: {self.path}")
        self._state = _State.OPEN
        connect = (
            _connect_read_only(self.path)
            if read_only
            else _connect(self.path, synchronous.upper(), busy_timeout)
        )
        self._thread = DBThread(connect, name=f"neotoma-store:{Path(self.path).name}")

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: str = "NORMAL",
        read_only: bool = False,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    ) -> EmbeddedStore:
        """Open (creating if needed) the store at ``path``; see :class:`EmbeddedStore`."""
        return cls(path, synchronous=synchronous, read_only=read_only, busy_timeout=busy_timeout)

    def __repr__(self) -> str:
        # A closing store already refuses work, so it reads as closed.
        state = "open" if self._state is _State.OPEN else "closed"
        return f"<EmbeddedStore {self.path!r} {state}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has run."""
        return self._state is not _State.OPEN

    def _bulk_reader(self) -> FileReads | None:
        # The bulk-read capability (transport._bulk): read-only connections of its own to
        # the file, so an in-memory or closed store has none.
        if self.path == ":memory:" or self.closed:
            return None
        return FileReads(_connect_read_only(self.path))

    @property
    def tenant_id(self) -> str | None:
        """The user entity ids are scoped to: None, the unscoped store's ids ignore the user
        (see :meth:`for_user`)."""
        return None

    @property
    def user_id(self) -> str:
        """The user this store reads and writes as: the local dev user."""
        return LOCAL_USER_ID

    async def _run(
        self, fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T], body: Mapping[str, Any]
    ) -> T:
        return await self._submit(fn, body, None)

    async def _submit(
        self,
        fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T],
        body: Mapping[str, Any],
        user: str | None,
        *,
        writes: bool | None = None,
    ) -> T:
        """Run ``fn(conn, body)`` on the store's thread, for ``user`` (a checked user id;
        None: the local dev user, the unscoped store's)."""
        if self._state is not _State.OPEN:
            raise RuntimeError("EmbeddedStore is closed")
        if writes is None:
            writes = fn not in _READS
        if writes and self.read_only:
            raise PermissionError("this EmbeddedStore was opened read-only")
        if user is None or user == LOCAL_USER_ID:
            job: Job[T] = Job(lambda conn: _encodable(fn, conn, body), writes=writes)
        else:
            scoped = functools.partial(_encodable, fn)
            # A write gives a user new to the file its row of ``users``, but forgetting or
            # restoring one never does: a mistyped user id is not written into the file.
            new = writes and fn not in _NO_NEW_USER
            job = Job(lambda conn: run_as(user, scoped, conn, body, writes=new), writes=writes)
        self._thread.submit(job)
        return await job.wait()

    def for_user(self, user_id: str) -> UserStore:
        """A view of this store that reads and writes ``user_id``'s memory alone.

        It is a :class:`~neotoma_agent.Transport` (and everything else this store
        implements) on the same open file, connection and thread: make as many as there
        are users, and close the store, not the views (a view's ``aclose`` leaves the store
        open). Every entity a user stores gets a tenant-scoped id (the same company
        remembered by two users is two entities), and every read through the view sees
        that user's rows only: another user's entity id is "not found". The unscoped
        store is the local dev user (:data:`~neotoma_agent.LOCAL_USER_ID`):
        ``store.for_user(LOCAL_USER_ID)`` reads and writes what the store itself does.

        Raises :class:`~neotoma_agent.InvalidUserIdError` for a user id that is not a
        str of 1 to 256 printable characters, before anything is read or written.
        """
        return UserStore(self, check_user_id(user_id))

    async def forget_user(self, user_id: str, *, reason: str | None = None) -> ForgottenUser:
        """Soft-delete everything ``user_id`` owns (every entity its conversations, turns,
        tool calls and ``remember`` calls stored), the way ``/delete_entity`` deletes one:
        no read through any view finds them afterwards. Reversible with
        :meth:`restore_user`; :func:`~neotoma_agent.purge_user` erases the bytes."""
        user = check_user_id(user_id)
        body = {"reason": reason}
        ids = await self._submit(forget_user_rows, body, user, writes=True)
        return ForgottenUser(user_id=user, entity_ids=tuple(ids))

    async def restore_user(self, forgotten: ForgottenUser | str) -> ForgottenUser:
        """Undo :meth:`forget_user`: the entities of its record come back (given a user id,
        every deleted entity of that user, those deleted one by one included)."""
        body: dict[str, Any]
        if isinstance(forgotten, ForgottenUser):
            user, body = check_user_id(forgotten.user_id), {"ids": list(forgotten.entity_ids)}
        else:
            user, body = check_user_id(forgotten), {"ids": None}
        ids = await self._submit(restore_user_rows, body, user, writes=True)
        return ForgottenUser(user_id=user, entity_ids=tuple(ids))

    async def aclose(self) -> None:
        """Finish queued work and close the file. Idempotent."""
        if self._state is not _State.OPEN:
            return
        self._state = _State.CLOSING
        try:
            await anyio.to_thread.run_sync(self._thread.stop)
        finally:
            self._state = _State.CLOSED
            _forget_page_rows()


_ACTIONS: dict[str, Callable[[sqlite3.Connection, Mapping[str, Any]], dict[str, Any]]] = {
    "store": store,
    "retrieve_entity_by_identifier": retrieve_entity_by_identifier,
    "create_relationship": create_relationship,
    "create_relationships": create_relationships,
    "get_entity_snapshot": get_entity_snapshot,
    "list_observations": list_observations,
    "retrieve_related_entities": retrieve_related_entities,
    "entities/query": query_entities,
    "correct": correct,
    "delete_entity": delete_entity,
    "restore_entity": restore_entity,
    SEARCH_ACTION: text_search,
    # The reads behind a server's GET routes (the dev server's GET handlers forward here).
    "get_entity": get_entity,
    "get_entity_observations": get_entity_observations,
    "get_entity_relationships": get_entity_relationships,
    "get_relationship": get_relationship,
    "get_relationships": get_relationships,
}

# Actions that only read: they run without a savepoint of their own.
_READS = frozenset(
    (
        replay_statuses,
        lookup_each,
        retrieve_entity_by_identifier,
        get_entity_snapshot,
        list_observations,
        retrieve_related_entities,
        query_entities,
        *_CONVERSATION_READS,
        get_entity,
        get_entity_observations,
        get_entity_relationships,
        get_relationship,
        get_relationships,
        text_search,
    )
)


# Writes that act on a user's existing rows only: a user the file does not know has none.
_NO_NEW_USER = frozenset((forget_user_rows, restore_user_rows))


@attrs.define(init=False, repr=False)
class UserStore(_Actions):
    """One user's view of an open :class:`EmbeddedStore` (:meth:`EmbeddedStore.for_user`).

    A :class:`~neotoma_agent.Transport` like the store itself, whose every read and write
    is that user's alone; it shares the store's file, connection and thread, so views cost
    nothing to make. ``aclose()`` (and ``async with``) leaves the store open: close the
    store when every view is done.
    """

    _store: EmbeddedStore
    _user: str

    def __init__(self, store: EmbeddedStore, user_id: str) -> None:
        """Use :meth:`EmbeddedStore.for_user` (it checks the user id)."""
        self._store = store
        self._user = user_id

    def __repr__(self) -> str:
        # The user id is left out: a repr lands in logs and tracebacks.
        return f"<UserStore of {self._store!r}>"

    @property
    def user_id(self) -> str:
        """The user this view reads and writes as."""
        return self._user

    @property
    def tenant_id(self) -> str | None:
        """The user its entity ids are scoped to: its user id (None for the local dev
        user, whose ids ignore the user, as the unscoped store's do)."""
        return tenant_of(self._user)

    @property
    def unscoped(self) -> EmbeddedStore:
        """The store this is a view of (itself the local dev user's)."""
        return self._store

    @property
    def path(self) -> str:
        """The store's file (``":memory:"`` for an in-memory store)."""
        return self._store.path

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only."""
        return self._store.read_only

    @property
    def closed(self) -> bool:
        """True once the store is closed."""
        return self._store.closed

    async def aclose(self) -> None:
        """Nothing to release: the store stays open (close it with its own ``aclose``)."""

    def for_user(self, user_id: str) -> UserStore:
        """Another user's view of the same store (see :meth:`EmbeddedStore.for_user`)."""
        return self._store.for_user(user_id)

    def _bulk_reader(self) -> FileReads | None:
        if self._store.path == ":memory:" or self._store.closed:
            return None
        return FileReads(_connect_read_only(self._store.path), user=self._user)

    async def _run(
        self, fn: Callable[[sqlite3.Connection, Mapping[str, Any]], T], body: Mapping[str, Any]
    ) -> T:
        return await self._store._submit(fn, body, self._user)
