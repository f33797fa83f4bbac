"""A turn on a store file, in the caller's thread: the turn machine's synchronous driver.

A coding-agent hook is a fresh process that must answer at once, so on an embedded store it
opens and closes its turns here: :class:`TurnFile` runs the steps of the turn machine
(``_engine``) and answers each request they yield with the store's own action on the file
(:meth:`TurnFile.answer`), each in one transaction, loading neither asyncio, anyio, the
store's thread nor the async driver (``_phases``). The steps are the ones the async driver
runs: the enter's user store (``Entering``), the history pages (``_recall.history.paged_history``),
the retrieval plan and its ranking (``_recall.retrieval.retrieval``), the closings and a re-run's
replays (``TurnMachine``: its tool calls too, ``ToolObservations``). So a turn opened and
closed here writes what ``NeotomaMemory.open_turn`` / ``close_turn`` / ``abandon_turn`` of a
memory with default settings write, and renders the same context block
(tests/hooks/test_hook_embedded.py replays recorded sessions both ways and compares every
row and every answer).

Unlike the async enter, this one has no deadline of its own (the file's reads answer at
once; ``busy_timeout`` bounds the wait for another writer's lock), its reads run one after
another in the engine's order (the user store first: its answer says whether the turn was
open before; then the history read, then the lookups), and a failed user store wrote
nothing (one transaction), so nothing is abandoned: the turn stays due.

The hooks wing reaches this module through ``hooks/_core`` only.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..._engine import (
    Ending,
    HistoryPage,
    Lookup,
    Lookups,
    Machine,
    Observations,
    Opened,
    Request,
    Store,
    ToolObservations,
    TurnMachine,
    run,
)
from ..._engine.closing import check_model, close_failure, closing_run, started_at
from ..._records.keys import turn_keys, validate_entity_id
from ..._records.payloads import ConversationSettings
from ..._records.text import check_text
from .._bodies import present, store_body
from . import _connect
from ._read import list_observations, retrieve_entity_by_identifier
from ._write import store

if TYPE_CHECKING:
    from ..._recall.history import HistoryTurn
    from ..._recall.retrieval import Found
    from ..._records.tool_payload import ToolPayloads
    from ..._records.tools import ToolCall
    from .._results import StoreResult

__all__ = ["Opening", "Stored", "TurnFile"]

T = TypeVar("T")

#: the tool calls' entity type (a turn record REFERS_TO them)
_TOOL_TYPE = "tool_invocation"


class Stored(NamedTuple):
    """A store's answer as the store file gave it, and the entities of the body it got
    (what ``StoreResult.from_json`` aligns it with: a closing store never parses it)."""

    raw: dict[str, Any]
    request_entities: list[Any]


class Opening(NamedTuple):
    """What an opened turn wrote and read (as ``OpenTurn`` gives them)."""

    user_message_id: str
    retrieved_ids: tuple[str, ...]
    #: ``OpenTurn.context(max_chars=context_chars)``
    context: str


class TurnFile:
    """The store file at ``path``, opened as ``EmbeddedStore`` opens it (a context manager),
    to open and close turns on in this thread.

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

    def __enter__(self) -> TurnFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    # ------------------------------------------------------------------ the driver

    def _read(self, action: Callable[..., dict[str, Any]], body: Mapping[str, Any]) -> Any:
        return _connect.run(self.conn, action, body, writes=False)

    def answer(self, request: Request, parse: Callable[[Stored], Any] | None = None) -> Any:
        """The answer to one request of the turn machine: the store's own action on the
        file, the body as ``RestActions`` sends it. A store answers :class:`Stored` (a
        closing store never parses it), or what ``parse`` makes of it."""
        if isinstance(request, Store):
            payload = request.payload
            body = store_body(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
            )
            stored = Stored(_connect.run(self.conn, store, body, writes=True), body["entities"])
            return stored if parse is None else parse(stored)
        if isinstance(request, Lookup):
            body = {"identifier": request.identifier, "limit": request.limit}
            found = self._read(retrieve_entity_by_identifier, body)
            # As Entity.from_json reads a lookup's entity.
            return [
                (_entity_id(e), _name(e.get("canonical_name")))
                for e in _items(found.get("entities"))
            ]
        if isinstance(request, Observations):
            return self._fields(request.entity_id)
        if isinstance(request, Lookups):
            return self._lookups(request)
        if isinstance(request, HistoryPage):
            from .._results import RecentConversation  # only an enter reads history
            from ._conversations import recent_conversation

            body = present(entity_id=request.entity_id, limit=request.limit, before=request.before)
            return RecentConversation.from_json(self._read(recent_conversation, body))
        return self._tool_fields(request)

    def _fields(self, entity_id: str) -> list[Mapping[str, Any]]:
        # The fields of the entity's observations, newest first (the first page).
        body = {"entity_id": entity_id, "limit": 100, "offset": 0}
        listed = self._read(list_observations, body)
        return [
            fields if isinstance(fields, Mapping) else {}
            for fields in (o.get("fields") for o in _items(listed.get("observations")))
        ]

    def _lookups(self, request: Lookups) -> Found:
        # Each lookup of the plan in turn, its failure in its slot (as retrieve's).
        from ..._recall.retrieval import Found  # only an enter retrieves
        from .._results import LookupResult

        found = Found(request.plan)
        for slot, (_, what, by, kind) in enumerate(request.plan):
            # The body RestActions.retrieve_entity_by_identifier sends.
            body = present(identifier=what, entity_type=kind, by=by, limit=request.limit)
            try:
                answer = LookupResult.from_json(self._read(retrieve_entity_by_identifier, body))
            except Exception as exc:
                found.failed(slot, exc)
            else:
                found.answered(slot, answer.entities)
        return found

    def _tool_fields(self, request: ToolObservations) -> list[list[Mapping[str, Any]]]:
        # As _tool_rerun.stored_tool_fields reads them: the calls the turn record REFERS_TO
        # (none for a record not stored), then the observations of each holding a reading.
        from ...exceptions import NotFoundError  # only a re-run whose calls ran again
        from ._edges import retrieve_related_entities

        body = {
            "entity_id": request.record_id,
            "direction": "outbound",
            "max_hops": 1,
            "relationship_types": ["REFERS_TO"],
        }
        try:
            related = self._read(retrieve_related_entities, body)
        except NotFoundError:
            return []
        ids = dict.fromkeys(
            _entity_id(e)
            for e in _items(related.get("entities"))
            if e.get("entity_type") == _TOOL_TYPE
        )
        found = []
        for entity_id in ids:
            try:
                fields = self._fields(entity_id)
            except NotFoundError:
                fields = []
            found.append([f for f in fields if "invoked_at" in f])
        return found

    def drive(self, machine: Machine[T], parse: Callable[[Stored], Any] | None = None) -> T:
        """Run a step of the turn machine to its end on the file, in this thread
        (``parse``: what a store's answer is sent in as, :meth:`answer`)."""
        return run(machine, lambda request: self.answer(request, parse))

    # ------------------------------------------------------------------ turns

    def open_turn(
        self,
        platform: str,
        conversation_id: str,
        turn_id: str,
        user_message: str,
        *,
        model: str | None,
        context_chars: int,
    ) -> Opening:
        """Open turn ``turn_id`` of ``conversation_id`` (``platform`` names the harness), as
        ``open_turn`` of a memory with default settings would, and render its context
        block within ``context_chars``.

        Raises what the user store raises (``IdempotencyMismatchError`` for a turn id stored
        before with another message); the reads after it are best-effort, as the engine's.
        """
        # Here: a closing (most events that store) needs none of the enter's reads.
        from ..._engine import Entering, Prompt
        from ..._recall.context import render_context
        from ..._recall.extract import extract
        from ..._recall.history import DEFAULT_HISTORY_TURNS, paged_history
        from ..._recall.retrieval import (
            DEFAULT_MAX_IDENTIFIERS,
            DEFAULT_RANKING,
            EMPTY_RETRIEVAL,
            recent_entities,
            retrieval,
        )
        from ..._records.payloads import RunFields

        text = check_text("user_message", user_message)
        keys = turn_keys(conversation_id, turn_id)
        identifiers = extract(text, None, DEFAULT_MAX_IDENTIFIERS)
        entering = Entering(
            TurnMachine(ConversationSettings(platform=platform), None),
            Prompt(keys, text, model=check_model(model)),
            run=RunFields(started_at=started_at(keys)),
            retrieved=EMPTY_RETRIEVAL,
        )
        self.drive(entering.store(), _store_result)
        # As Phases.enter: an answer it could not align is asked by name instead.
        user_message_id = self.drive(entering.open()).user_message_id
        # Phases.history: the last turns before this one; best-effort (a failed read: none).
        history: tuple[HistoryTurn, ...] | None = None
        with contextlib.suppress(Exception):
            step = paged_history(conversation_id, limit=DEFAULT_HISTORY_TURNS, before=turn_id)
            history = self.drive(step)
        # Retrieval beside the history read's recent entities (read already), as
        # Phases.retrieve's.
        history = history or ()
        recent = recent_entities(history)

        def answer(request: Request) -> Any:
            found = self.answer(request)
            found.recent = recent
            return found

        # A default memory's ranking (Phases.ranking of default settings).
        lookups = retrieval(
            identifiers, text, others=True, started=time.perf_counter(), **DEFAULT_RANKING
        )
        retrieved = run(lookups, answer)
        context = render_context(retrieved.entities, history, max_chars=context_chars)
        return Opening(user_message_id, retrieved.ids, context)

    def close_turn(
        self,
        platform: str,
        conversation_id: str,
        turn_id: str,
        *,
        ending: str,
        reply: str | None,
        error_class: str | None,
        model: str | None,
        user_message_id: str | None,
        retrieved_ids: Sequence[str],
        tools: Sequence[ToolCall],
    ) -> None:
        """Store the closing phase of turn ``turn_id`` (``ending``: ``completed`` with
        ``reply``, else abandoned with ``reply`` as the partial reply and ``error_class``,
        by default ``Abandoned``), as ``close_turn`` / ``abandon_turn`` of a memory with
        default settings would from the ids its opening kept (``user_message_id``, found
        by name when unknown; ``retrieved_ids``). A re-run whose calls ran again replays
        with the readings stored before, as the engine's does.

        Raises what the store raises (``IdempotencyMismatchError`` for a turn stored before
        with other content, ``ValidationError`` for content it refuses).
        """
        keys = turn_keys(conversation_id, turn_id)
        ids = tuple(validate_entity_id(i) for i in retrieved_ids)
        checked_model = check_model(model)
        calls: Sequence[ToolCall] = ()
        payloads: ToolPayloads | None = None
        if tools:
            # Only then: a turn without calls (most) loads neither the tool-call API's
            # classes nor the tool payloads.
            from ..._records.tool_payload import DEFAULT_PAYLOADS
            from ..._records.tools import check_tools, merge_tools

            calls = merge_tools(keys.user_turn_key, (), check_tools(tools))
            payloads = DEFAULT_PAYLOADS
        machine = TurnMachine(ConversationSettings(platform=platform), payloads)
        if user_message_id:
            validate_entity_id(user_message_id)
        elif ids:
            user_message_id = self.drive(machine.find(keys.user_turn_key, "conversation_message"))
        opened = Opened(
            keys=keys,
            turn_number=None,
            user_message_id=user_message_id or "",
            conversation_entity_id=self.drive(machine.find(conversation_id, "conversation")) or "",
            turn_record_id=None,
            replayed=False,
            prior_status=None,
        )
        try:
            completed = ending == "completed"
            end = Ending(
                opened,
                "completed" if completed else "abandoned",
                check_text("assistant_message" if completed else "partial_reply", reply or ""),
                ids,
                tools=tuple(calls),
                error_class=None if completed else error_class or "Abandoned",
                model=checked_model,
            )
            self.drive(machine.close_store(end, closing_run(end)))
        except Exception as exc:
            # As close_turn / abandon_turn raise a failed closing store (chained to its cause).
            raise close_failure(keys, exc)  # noqa: B904


def _store_result(stored: Stored) -> StoreResult:
    # The user store's answer, read as the engine reads it (what it wrote, and whether the
    # turn was open before).
    from .._results import StoreResult

    return StoreResult.from_json(stored.raw, request_entities=stored.request_entities)


def _entity_id(entity: Mapping[str, Any]) -> str:
    return str(entity.get("id") or entity.get("entity_id") or "")


def _name(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _items(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
