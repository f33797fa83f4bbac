"""A turn's closing store as pure functions, the one source of its payloads.

The turn machine (``_engine``), whichever driver runs it (the async ``_phases.Phases.close``,
the synchronous one on a store file, ``transport.embedded._turns``, a hook's), builds the
closing store of a turn's :class:`~neotoma_agent._engine.phase_records.Ending` from here: its run
fields, its payload for a given run, the content key of a second abandonment, and the
earlier runs a re-run replays. So a turn closed either way writes the same store, byte for
byte. No I/O and no event loop here: a hook process imports this without them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._records.keys import TurnKeys, turn_id_ms
from .._records.payloads import (
    ConversationSettings,
    RunFields,
    StorePayload,
    closing_payload,
)
from .._records.text import check_text
from .._util.clock import iso_ms, now_ms
from ..exceptions import IdempotencyMismatchError, NeotomaError, TurnCloseError
from .phase_records import Ending

if TYPE_CHECKING:
    from .._records.tool_payload import ToolPayloads
    from .._records.tools import ToolCall

__all__ = [
    "META_FIELDS",
    "TOOL_CLOCK_FIELDS",
    "ClosingBuild",
    "KeyedBuild",
    "check_model",
    "close_failure",
    "closing_builder",
    "closing_run",
    "content_key",
    "ended_at",
    "matching_runs",
    "mismatch",
    "named",
    "started_at",
    "tool_entities",
]

# How many earlier runs a re-run tries (one per revision of the turn that wrote the phase).
MAX_RERUN_TRIES = 8

#: A closing store's payload as a function of its run fields.
ClosingBuild = Callable[[RunFields], StorePayload]
#: A closing store's payload as a function of its run fields and key (see :func:`content_key`).
KeyedBuild = Callable[[RunFields, str | None], StorePayload]

#: Keys a store may add to an observation's fields that no payload sets.
META_FIELDS: Final = frozenset({"schema_version", "canonical_name"})
#: What a tool call's clock gave (``t.tool`` reads both when the call runs): a re-run of
#: the turn reads them again, so they never tell two runs of one turn apart.
TOOL_CLOCK_FIELDS: Final = frozenset({"invoked_at", "duration_ms"})


def check_model(model: object) -> str | None:
    """``model`` as a turn stores it (``None``: not named); refused if not a non-empty str."""
    if model is None:
        return None
    if not isinstance(model, str):
        raise TypeError(f"model must be a str or None, not {type(model).__name__}")
    if not model.strip():
        raise ValueError("model must not be empty (pass None)")
    return check_text("model", model)


def close_failure(keys: TurnKeys, error: BaseException) -> Exception:
    """The error a failed closing store raises after a normal body.

    A refused rewrite (:class:`IdempotencyMismatchError`, already carrying a ``revision=``
    hint) is raised as it is: it asks the caller for a decision, it is not an outage.
    Anything else becomes :class:`TurnCloseError`, chained to its cause; when the store
    was unreachable (a transient failure no outbox queued) its message says how an
    outbox keeps the reply.
    """
    if isinstance(error, IdempotencyMismatchError):
        return error
    message = f"the closing store of turn {keys.turn_id!r} failed: {type(error).__name__}: {error}"
    from ..transport._retry import is_transient  # only a failed close reads it

    if isinstance(error, NeotomaError) and is_transient(error):
        # With an outbox a transient failure is queued, never raised: there is none here.
        message += (
            "; the reply was not stored. To keep a reply the store cannot take now and "
            "deliver it when the store is back, wrap the transport in an outbox: "
            "OutboxTransport(transport, PATH)"
        )
    failure = TurnCloseError(message)
    failure.__cause__ = error
    return failure


def mismatch(
    keys: TurnKeys, payload: StorePayload, phase: str, exc: IdempotencyMismatchError
) -> IdempotencyMismatchError:
    """The error of a phase's store refused because its key holds other content."""
    what = "user message" if phase == "user" else "reply or tool calls"
    # Keys fold ids as entity ids do, so the earlier turn may have had other ids.
    folded_cid, folded_tid = keys.folded
    return IdempotencyMismatchError(
        f"turn {keys.turn_id!r} of conversation {keys.conversation_id!r} was already "
        f"stored with a different {what} (idempotency key {payload.idempotency_key!r}); "
        "ids that differ only in letter case or whitespace runs fold together into one "
        f"turn, here turn {folded_tid!r} of conversation {folded_cid!r}",
        status=exc.status,
        code=exc.code,
        body=exc.body,
        hint="pass revision=2 (3, ...) to record a regenerated reply or edited message "
        "under the same turn_id, or use a new turn_id for a new turn",
    )


def started_at(keys: TurnKeys) -> str:
    """When the turn started, as the user store's run fields hold it: the time its id
    carries (a UUIDv7, the default), else now.

    Derived from the id where it can be, so a re-run sends the same value (and replays
    without a read); for other ids, a re-run's store recovers it
    (``TurnMachine.store_phase``).
    """
    ms = turn_id_ms(keys.turn_id)
    return iso_ms(now_ms() if ms is None else ms)


def ended_at() -> str:
    """Now, as a turn record's ``ended_at``."""
    return iso_ms(now_ms())


def closing_run(ending: Ending) -> RunFields:
    """The run fields of ``ending``'s closing store (``ended_at`` read now)."""
    # started_at again (the value the user store wrote or replayed, never a new reading):
    # the closing observation then holds every field the record's snapshot does, so a
    # store keeps one copy (the embedded store writes no fields for an observation equal to
    # its snapshot), and a real server's last_write keeps the same value.
    opened = ending.opened
    return RunFields(
        started_at=opened.started_at,
        ended_at=ended_at(),
        retrieved_entity_ids=ending.retrieved_ids,
        injected_context_chars=ending.context_chars,
        started_conversation=opened.started_conversation and opened.started_at is not None,
    )


def tool_entities(
    conversation: ConversationSettings,
    payloads: ToolPayloads,
    keys: TurnKeys,
    tools: Sequence[ToolCall],
) -> list[dict[str, Any]]:
    """The ``tool_invocation`` request elements of a turn's calls (capped, redacted)."""
    if not tools:
        return []  # a turn without calls (most prompts' abandonments) loads no tool payloads
    from .._records.tool_payload import tool_entity

    platform = conversation.platform
    return [tool_entity(c, keys.user_turn_key, platform, payloads) for c in tools]


def closing_builder(
    conversation: ConversationSettings, ending: Ending, tools: Sequence[Mapping[str, Any]]
) -> KeyedBuild:
    """``ending``'s closing payload (``tools``: its calls' request elements), as a function
    of the run fields and the key (``None``: the phase's own; see :func:`content_key`)."""
    opened = ending.opened
    keys, reply = opened.keys, ending.reply
    # What every run of the store sends alike (the run fields and the key aside).
    same: dict[str, Any] = {
        "conversation_entity_id": opened.conversation_entity_id or None,
        "user_message_id": opened.user_message_id or None,
        "retrieved_ids": ending.retrieved_ids,
        "cited_ids": ending.cited_ids,
        "turn_number": opened.turn_number,
        "produced": ending.produced,
        "tools": tools,
        "model": ending.model,
        "started_at": opened.started_at,
        "error_class": None if ending.status == "completed" else ending.error_class or "",
    }

    def build(fields: RunFields, key: str | None = None) -> StorePayload:
        return closing_payload(conversation, keys, reply, run=fields, idempotency_key=key, **same)

    return build


def content_key(keys: TurnKeys, build: KeyedBuild) -> str:
    """The key of an abandonment that differs from an earlier one of the same turn id.

    Derived from its own content (the run fields and the calls' clock readings left out),
    so an identical retry still collapses into one store.
    """
    payload = build(RunFields(), None)
    entities = list(payload.entities)
    for index in payload.tool_indexes:  # a retry's calls run again, at other times
        entities[index] = {k: v for k, v in entities[index].items() if k not in TOOL_CLOCK_FIELDS}
    blob = json.dumps(entities, separators=(",", ":"), ensure_ascii=False)
    return f"{keys.idempotency_key('abandoned')}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def named(canonical_name: str | None, key: str, entity_type: str) -> bool:
    """Whether an entity's ``canonical_name`` is the schema-rule name ``{entity_type}:{key}``
    (how ``find`` tells the protocol's own entity among a lookup's substring matches)."""
    return (canonical_name or "").casefold() == f"{entity_type}:{key}".casefold()


def matching_runs(
    observations: Iterable[Mapping[str, Any]],
    build: ClosingBuild,
    run: RunFields,
) -> list[RunFields]:
    """The run fields of the turn record's ``observations`` (their fields, newest first)
    that this phase's earlier runs wrote: equal to what ``build(run)`` sends but for them."""
    found: list[RunFields] = []
    for fields in observations:
        earlier = RunFields.of(fields)
        if earlier == run or earlier in found:
            continue
        rebuilt = build(earlier)
        record = dict(rebuilt.entities[rebuilt.turn_record_index])
        record.pop("entity_type", None)
        stored = {k: v for k, v in fields.items() if k not in META_FIELDS}
        if record == stored:
            found.append(earlier)
    return found[:MAX_RERUN_TRIES]
