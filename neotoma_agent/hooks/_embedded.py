"""The turn machine driven on an embedded store file, without the event loop; a hook's closing.

A hook is a fresh process that must answer at once, so on an embedded store it runs the turn
machine (``_engine``) in its own thread: :func:`drive` answers each request the machine
yields with the store's own action on the file (:class:`EmbeddedFile`), each in one
transaction, loading neither asyncio, anyio, the store's thread nor the async driver
(``_phases``). The decisions are the machine's, so a turn closed here writes what
``NeotomaMemory.close_turn`` / ``abandon_turn`` write with the ids the state file kept
(tests/hooks/test_hook_embedded.py replays recorded sessions both ways and compares every
row).

A Stop closes a turn another process opened (so does a session's end, abandoning a turn
that got no Stop): :func:`close`. A prompt opens one: ``hooks._embedded_open``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from .._closing import check_model, close_failure, closing_run
from .._engine import (
    Ending,
    Lookup,
    Machine,
    Observations,
    Opened,
    Request,
    Store,
    TurnMachine,
    run,
)
from .._keys import turn_keys, validate_entity_id
from .._payloads import ConversationSettings
from .._text import check_text
from ..transport._bodies import store_body
from ..transport.embedded import _connect
from ..transport.embedded._read import list_observations, retrieve_entity_by_identifier
from ..transport.embedded._write import store
from ._state import PendingTurn

if TYPE_CHECKING:
    from .._tool_payload import ToolPayloads
    from .._tools import ToolCall

__all__ = ["EmbeddedFile", "Stored", "close", "drive"]

T = TypeVar("T")


class Stored(NamedTuple):
    """A store's answer as the store file gave it, and the entities of the body it got
    (what ``StoreResult.from_json`` aligns it with: a closing store never parses it)."""

    raw: dict[str, Any]
    request_entities: list[Any]


class EmbeddedFile:
    """The store file, opened as ``EmbeddedStore`` opens it (a context manager).

    ``busy_timeout``: the seconds, from now, that all its work together may wait for
    another writer's lock (at most the store's own 10 s). Each action waits what is left
    of it: a file locked past it fails with "database is locked" (once the time is spent,
    an action still runs when the lock is free), so a hook never waits out SQLite's own
    timeout once per store.
    """

    def __init__(self, path: str, *, busy_timeout: float = _connect.DEFAULT_BUSY_TIMEOUT) -> None:
        self._path = path
        self._deadline = time.monotonic() + min(busy_timeout, _connect.DEFAULT_BUSY_TIMEOUT)
        self._busy_ms = -1  # what the connection has set
        self._conn: sqlite3.Connection | None = None

    def open(self) -> None:
        """Open the file now (``EmbeddedStore.open`` does): what keeps it from opening
        raises here."""
        _ = self.conn

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, opened on first use, waiting for a lock what is left of the time."""
        left = self._deadline - time.monotonic()
        if self._conn is None:
            self._conn = _connect.connect(self._path, "NORMAL", left)()
            self._busy_ms = _connect.busy_ms_of(left)
        busy_ms = _connect.busy_ms_of(self._deadline - time.monotonic())
        if busy_ms != self._busy_ms:
            self._conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
            self._busy_ms = busy_ms
        return self._conn

    def __enter__(self) -> EmbeddedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    def answer(self, request: Request, parse: Callable[[Stored], Any] | None = None) -> Any:
        """The answer to one request of the turn machine: the store's own action on the
        file, the body as ``RestActions`` sends it. A store answers :class:`Stored` (a
        closing store never parses it), or what ``parse`` makes of it.

        A re-run's tool calls are not read here (``ToolObservations``): its closing store
        stays refused, as the engine's would be without that read.
        """
        conn = self.conn
        if isinstance(request, Store):
            payload = request.payload
            body = store_body(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
            )
            stored = Stored(_connect.run(conn, store, body, writes=True), body["entities"])
            return stored if parse is None else parse(stored)
        if isinstance(request, Lookup):
            body = {"identifier": request.identifier, "limit": request.limit}
            found = _connect.run(conn, retrieve_entity_by_identifier, body, writes=False)
            # As Entity.from_json reads a lookup's entity.
            return [
                (str(e.get("id") or e.get("entity_id") or ""), _name(e.get("canonical_name")))
                for e in _items(found.get("entities"))
            ]
        if isinstance(request, Observations):
            # The fields of the entity's observations, newest first (the first page).
            body = {"entity_id": request.entity_id, "limit": 100, "offset": 0}
            listed = _connect.run(conn, list_observations, body, writes=False)
            return [
                fields if isinstance(fields, Mapping) else {}
                for fields in (o.get("fields") for o in _items(listed.get("observations")))
            ]
        raise NotImplementedError(f"a hook does not answer {type(request).__name__}")


def drive(
    file: EmbeddedFile, machine: Machine[T], parse: Callable[[Stored], Any] | None = None
) -> T:
    """Run a step of the turn machine to its end on ``file``, in this thread (``parse``:
    what a store's answer is sent in as, :meth:`EmbeddedFile.answer`)."""
    return run(machine, lambda request: file.answer(request, parse))


def _name(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _items(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def close(file: EmbeddedFile, harness: str, row: PendingTurn, tools: Sequence[ToolCall]) -> None:
    """Store the closing phase of ``row`` (its ``ending``), as ``close_turn`` (completed) or
    ``abandon_turn`` (abandoned) of a memory with default settings would from these ids.

    Raises what the store raises (``IdempotencyMismatchError`` for a turn stored before
    with other content, ``ValidationError`` for content it refuses).
    """
    conv = row.conversation_id
    keys = turn_keys(conv, row.turn_id)
    ids = tuple(validate_entity_id(i) for i in (row.retrieved_ids or ()))
    model = check_model(row.model)
    calls: Sequence[ToolCall] = ()
    payloads: ToolPayloads | None = None
    if tools:
        # Only then: a turn without calls (most) loads neither the tool-call API's classes
        # nor the tool payloads.
        from .._tool_payload import DEFAULT_PAYLOADS
        from .._tools import check_tools, merge_tools

        calls = merge_tools(keys.user_turn_key, (), check_tools(tools))
        payloads = DEFAULT_PAYLOADS
    machine = TurnMachine(ConversationSettings(platform=harness), payloads)
    user_message_id = row.user_message_id or None
    if user_message_id is not None:
        validate_entity_id(user_message_id)
    elif ids:
        user_message_id = drive(file, machine.find(keys.user_turn_key, "conversation_message"))
    opened = Opened(
        keys=keys,
        turn_number=None,
        user_message_id=user_message_id or "",
        conversation_entity_id=drive(file, machine.find(conv, "conversation")) or "",
        turn_record_id=None,
        replayed=False,
        prior_status=None,
    )
    try:
        completed = row.ending == "completed"
        ending = Ending(
            opened,
            "completed" if completed else "abandoned",
            check_text("assistant_message" if completed else "partial_reply", row.reply or ""),
            ids,
            tools=tuple(calls),
            error_class=None if completed else row.error_class or "Abandoned",
            model=model,
        )
        drive(file, machine.close_store(ending, closing_run(ending)))
    except Exception as exc:
        # As close_turn / abandon_turn raise a failed closing store (chained to its cause).
        raise close_failure(keys, exc)  # noqa: B904
