"""A hook's closing stores on an embedded store file, without the event loop.

A Stop closes a turn another process opened (so does a session's end, abandoning a turn that
got no Stop). On an embedded store that is one store on the file: this module does it in the
hook's own thread, loading only the payload builders (``_closing``) and the store's write
path (``transport.embedded._write``), not the turn engine, asyncio, anyio or the store's
thread. It builds the same payloads from the same functions as ``NeotomaMemory.close_turn``
/ ``abandon_turn`` with the ids the state file kept, and runs the same store action in one
transaction, so the file ends up the same (tests/hooks/test_hook_embedded.py replays
recorded sessions both ways and compares every row). Opening a turn (retrieval, the history
read, the context block) stays on the engine.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._closing import (
    abandoned_builder,
    check_model,
    close_failure,
    closing_run,
    completed_builder,
    content_key,
    matching_runs,
    mismatch,
    named,
    tool_entities,
)
from .._keys import TurnKeys, turn_keys, turn_record_entity_id, validate_entity_id
from .._payloads import ConversationSettings, RunFields, StorePayload
from .._phase_records import Opened
from .._text import check_text
from ..exceptions import IdempotencyMismatchError
from ..transport._bodies import store_body
from ..transport.embedded import _connect
from ..transport.embedded._read import list_observations, retrieve_entity_by_identifier
from ..transport.embedded._write import store
from ._state import PendingTurn

if TYPE_CHECKING:
    from .._tools import ToolCall

__all__ = ["EmbeddedFile", "Stored", "close", "store_phase"]


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

    def store(self, payload: StorePayload, keys: TurnKeys, phase: str) -> Stored:
        """One phase's store, as ``Phases.store`` sends it (the same body); its answer."""
        body = store_body(
            payload.entities,
            idempotency_key=payload.idempotency_key,
            relationships=payload.relationships,
        )
        try:
            raw = _connect.run(self.conn, store, body, writes=True)
        except IdempotencyMismatchError as exc:
            raise mismatch(keys, payload, phase, exc) from exc
        return Stored(raw, body["entities"])

    def find(self, key: str, entity_type: str) -> str | None:
        """``Phases.find``: the id of the ``entity_type`` named ``{entity_type}:{key}``."""
        body = {"identifier": key, "limit": 100}
        found = _connect.run(self.conn, retrieve_entity_by_identifier, body, writes=False)
        for entity in _items(found.get("entities")):
            # As Entity.from_json reads a lookup's entity.
            name = entity.get("canonical_name")
            if named(name if isinstance(name, str) else None, key, entity_type):
                return str(entity.get("id") or entity.get("entity_id") or "")
        return None

    def observation_fields(self, entity_id: str) -> list[Mapping[str, Any]]:
        """The fields of the entity's observations, newest first (the first page)."""
        body = {"entity_id": entity_id, "limit": 100, "offset": 0}
        listed = _connect.run(self.conn, list_observations, body, writes=False)
        return [
            fields if isinstance(fields, Mapping) else {}
            for fields in (o.get("fields") for o in _items(listed.get("observations")))
        ]


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
    user_message_id = row.user_message_id or None
    if user_message_id is not None:
        validate_entity_id(user_message_id)
    elif ids:
        user_message_id = file.find(keys.user_turn_key, "conversation_message")
    opened = Opened(
        keys=keys,
        turn_number=None,
        user_message_id=user_message_id or "",
        conversation_entity_id=file.find(conv, "conversation") or "",
        turn_record_id=None,
        replayed=False,
        prior_status=None,
    )
    conversation = ConversationSettings(conv, harness)
    entities: list[dict[str, Any]] = []
    if tools:
        # Only then: a turn without calls (most) loads neither the tool-call API's classes
        # nor the tool payloads.
        from .._tool_payload import DEFAULT_PAYLOADS
        from .._tools import check_tools, merge_tools

        calls = merge_tools(keys.user_turn_key, (), check_tools(tools))
        entities = tool_entities(conversation, DEFAULT_PAYLOADS, keys, calls)
    try:
        if row.ending == "completed":
            reply = check_text("assistant_message", row.reply or "")
            build = completed_builder(conversation, opened, reply, ids, (), (), entities, model)
            store_phase(file, build, closing_run(opened, ids, None), keys, "assistant")
            return
        partial = check_text("partial_reply", row.reply or "")
        error_class = row.error_class or "Abandoned"
        abandon = abandoned_builder(
            conversation, opened, partial, error_class, ids, (), (), entities, model
        )
        run = closing_run(opened, ids, None)
        try:
            store_phase(file, lambda fields: abandon(fields, None), run, keys, "abandoned")
        except IdempotencyMismatchError:
            # As Phases.abandon: an earlier, different abandonment of this turn id stays too.
            key = content_key(keys, abandon)
            store_phase(file, lambda fields: abandon(fields, key), run, keys, "abandoned")
    except Exception as exc:
        # As close_turn / abandon_turn raise a failed closing store (chained to its cause).
        raise close_failure(keys, exc)  # noqa: B904


def store_phase(
    file: EmbeddedFile,
    build: Callable[[RunFields], StorePayload],
    run: RunFields,
    keys: TurnKeys,
    phase: str,
) -> tuple[Stored, StorePayload]:
    """``Phases.store_turn_phase``: a re-run that differs only in its run fields replays;
    the store's answer and the payload that got it."""
    payload = build(run)
    try:
        return file.store(payload, keys, phase), payload
    except IdempotencyMismatchError as refused:
        try:
            record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id)
            earlier = matching_runs(file.observation_fields(record_id), build, run)
        except Exception:  # as Phases: the mismatch is what the caller sees
            earlier = []
        for fields in earlier:
            again = build(fields)
            try:
                return file.store(again, keys, phase), again
            except IdempotencyMismatchError:
                continue
        raise refused from None
