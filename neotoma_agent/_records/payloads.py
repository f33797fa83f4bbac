"""Pure functions that build the store payloads of a turn.

A server hashes the ``entities`` array (compact JSON, keys in the order given) to decide
whether a reused idempotency key is a replay or a mismatch; relationships are not hashed. So
every entity here is a pure function of the conversation settings, the turn's ids, the exact
text and the status, built with a fixed key order: no clocks, no counters, and no retrieval
results (retrieved ids travel only as relationships). Re-running a turn then replays instead
of failing, whatever retrieval found the second time.

The enter store creates the conversation entity; closing stores name it by id (an edge may
name an existing entity), so a turn adds one observation to the conversation, not two. Only
when its id is unknown (a turn closed by a process that never saw the enter store, and could
not find the conversation) does a closing store carry the entity itself.

Each builder returns a :class:`StorePayload`; its ``index`` attributes say which request
element holds which entity, so callers read ids back with ``StoreResult.entity_id(index)``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import attrs

from .._neotoma.identity import IdentityError, resolve_identity
from .._neotoma.undeclared import warn_undeclared
from .keys import TurnKeys
from .text import check_plain

__all__ = [
    "BOOKKEEPING_TYPES",
    "NO_SETTINGS",
    "RUN_FIELDS",
    "ConversationSettings",
    "Produced",
    "RunFields",
    "StorePayload",
    "closing_payload",
    "merge_produced",
    "produced_entity",
    "recorded_payload",
    "remembered_payload",
    "user_payload",
]

#: Entity types the turn protocol itself writes; lookups leave them out by default.
BOOKKEEPING_TYPES: Final = frozenset(
    {
        "conversation",
        "conversation_message",
        "conversation_turn",
        "turn_compliance",
        "turn_activity",
        "tool_invocation",
    }
)

TurnStatus = Literal["open", "completed", "abandoned"]

# Where each setting and outcome is written. A server keeps only declared fields in
# snapshots, so each goes to a declared field whose meaning fits, or stays
# on the observation where none does (see :mod:`neotoma_agent._recall.turn_record`):
#: the agent's platform: the conversation schema's "agent harness / tool name"
PLATFORM_FIELD: Final = "tool"
#: the platform again, as the turn records and the real Inspector name it
HARNESS_FIELD: Final = "harness"
#: where earlier versions wrote the platform (undeclared: only old embedded snapshots hold it)
LEGACY_PLATFORM_FIELD: Final = "platform"
#: a turn a repair closed: the turn schema's declared boolean for a safety net that fired
REPAIRED_FIELD: Final = "safety_net_used"
#: why a repair closed a turn (undeclared: read from the closing observation)
REASON_FIELD: Final = "reason"
#: the exception class of an abandoned turn (undeclared: read from the closing observation)
ERROR_CLASS_FIELD: Final = "error_class"
#: the turn that started its conversation (undeclared: see ``RunFields``)
STARTED_CONVERSATION_FIELD: Final = "started_conversation"

# Keys a store reads as instructions, not fields: the library sets them itself.
_RESERVED_ENTITY_FIELDS: Final = frozenset({"entity_type", "intent", "target_id"})

# Keys the protocol owns on a user message: extra fields may not override them.
_RESERVED_MESSAGE_FIELDS: Final = frozenset(
    {"entity_type", "intent", "target_id", "role", "sender_kind", "content", "turn_key"}
)


@attrs.frozen
class Produced:
    """An entity a reply produces (``t.remember``): the request element and its id."""

    entity: Mapping[str, Any]
    #: the id the store gives it (computed locally, as the server computes it)
    entity_id: str


def merge_produced(items: Iterable[Produced]) -> tuple[Produced, ...]:
    """``items`` with one entry per entity id: fields of a repeated id merge, later wins."""
    by_id: dict[str, Produced] = {}
    for item in items:
        earlier = by_id.pop(item.entity_id, None)
        if earlier is not None:
            item = attrs.evolve(item, entity={**earlier.entity, **item.entity})
        by_id[item.entity_id] = item
    return tuple(by_id.values())


def produced_entity(
    entity_type: object,
    fields: Mapping[str, Any],
    *,
    extends: Iterable[str] = (),
    tenant: str | None = None,
) -> Produced:
    """Validate an entity an agent produces and compute its id, before any I/O.

    Refused (``TypeError`` / ``ValueError`` / ``ValidationError``): a type that is not a
    non-empty string, the protocol's own types (``conversation*``), reserved keys
    (``entity_type``, ``intent``, ``target_id``), values that are not plain JSON, and
    fields from which no identity can be derived (give it a ``name`` or ``title``). When the
    id is one of ``extends`` (what retrieval found) the entity is written onto that id, so
    it is extended, never duplicated. Fields the type does not declare are kept in the
    request but warned of (:class:`~neotoma_agent.UndeclaredFieldWarning`): no store keeps
    them in the entity's snapshot. ``tenant``: the user the store scopes ids to (its
    ``tenant_id``), None for unscoped ids.
    """
    if not isinstance(entity_type, str):
        raise TypeError(f"entity_type must be a str, not {type(entity_type).__name__}")
    if not entity_type.strip() or entity_type != entity_type.strip():
        raise ValueError("entity_type must be a non-empty name without surrounding whitespace")
    if entity_type in BOOKKEEPING_TYPES or entity_type.startswith("conversation"):
        raise ValueError(
            f"entity_type {entity_type!r} is the turn protocol's own: only turns write it"
        )
    reserved = _RESERVED_ENTITY_FIELDS.intersection(fields)
    if reserved:
        raise ValueError(f"fields must not set {sorted(reserved)} (the library sets them)")
    if not fields:
        raise ValueError("an entity needs at least one field (e.g. name=...)")
    plain = check_plain("an entity field", dict(fields))
    try:
        identity = resolve_identity(entity_type, plain).in_tenant(tenant)
    except IdentityError as exc:
        raise ValueError(
            f"no identity can be derived for this {entity_type!r}: give it a name, title or "
            "another identifying field"
        ) from exc
    warn_undeclared(identity.entity_type, plain)
    entity: dict[str, Any] = {"entity_type": entity_type, **plain}
    if identity.entity_id in set(extends):
        # Name the entity retrieval found explicitly: the store then appends to it even if
        # its own resolution (a heuristic over existing names) would have gone elsewhere.
        entity["target_id"] = identity.entity_id
    return Produced(entity, identity.entity_id)


def remembered_payload(produced: Produced) -> StorePayload:
    """One entity stored on its own (``memory.remember``), under a key of its content."""
    blob = json.dumps(produced.entity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]
    return StorePayload(
        entities=(produced.entity,),
        relationships=(),
        idempotency_key=f"neotoma-agent-remember-{digest}",
    )


# The private records below are NamedTuples, not attrs: every process that stores a turn
# builds them (a coding-agent hook, a fresh process per event, among them), and they
# validate nothing. Produced is public: it stays what it is.
class ConversationSettings(NamedTuple):
    """What every payload of one conversation shares but its id (which the turn's
    :class:`~neotoma_agent._records.keys.TurnKeys` carry): pass them by name."""

    platform: str | None = None
    title: str | None = None


#: A conversation whose platform and title are not known (or not to be written).
NO_SETTINGS: Final = ConversationSettings()


class StorePayload(NamedTuple):
    """One ``store`` request: entities, relationships, key, and where each entity sits."""

    entities: tuple[Mapping[str, Any], ...]
    relationships: tuple[Mapping[str, Any], ...]
    idempotency_key: str
    conversation_index: int | None = None
    user_index: int | None = None
    assistant_index: int | None = None
    turn_record_index: int = 0
    #: where the produced entities sit, in the order produced
    produced_indexes: tuple[int, ...] = ()
    #: where the ``tool_invocation`` entities sit, in the order given
    tool_indexes: tuple[int, ...] = ()


def conversation_entity(
    conversation_id: str,
    settings: ConversationSettings = NO_SETTINGS,
    started_at: str | None = None,
) -> dict[str, Any]:
    """The ``conversation`` entity, keyed by ``conversation_id`` (a schema rule).

    The platform goes to both declared fields a real server has for it (``tool``, which
    earlier versions wrote, and ``harness``, which its Inspector shows); ``started_at``
    only from the closing store of the turn that started the conversation.
    """
    entity: dict[str, Any] = {
        "entity_type": "conversation",
        "conversation_id": conversation_id,
    }
    if settings.title is not None:
        entity["title"] = settings.title
    if settings.platform is not None:
        entity[PLATFORM_FIELD] = settings.platform
        entity[HARNESS_FIELD] = settings.platform
    if started_at is not None:
        entity["started_at"] = started_at
    return entity


def stored_platform(fields: Mapping[str, Any]) -> str | None:
    """The platform a conversation snapshot holds (written by this version or an earlier one)."""
    for name in (PLATFORM_FIELD, LEGACY_PLATFORM_FIELD):
        value = fields.get(name)
        if isinstance(value, str):
            return value
    return None


def message_entity(
    role: Literal["user", "assistant"],
    content: str,
    turn_key: str,
    *,
    turn_number: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``conversation_message`` with the exact ``content``, keyed by ``turn_key``."""
    entity: dict[str, Any] = {
        "entity_type": "conversation_message",
        "role": role,
        "sender_kind": role,
        "content": content,
        "turn_key": turn_key,
    }
    if turn_number is not None:
        entity["turn_number"] = turn_number
    if extra:
        # Sorted so the same mapping hashes the same whatever order the caller built it in.
        for key in sorted(extra):
            entity[key] = extra[key]
    return entity


def validate_user_extra(extra: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Refuse extra user-message fields that would override the protocol's own."""
    if extra is None:
        return None
    if not isinstance(extra, Mapping):
        raise TypeError("user_extra must be a mapping")
    for key in extra:
        if not isinstance(key, str):
            raise TypeError("user_extra keys must be str")
        if key in _RESERVED_MESSAGE_FIELDS or key == "turn_number":
            raise ValueError(f"user_extra must not set the protocol field {key!r}")
    return dict(extra)


#: The turn-record fields a re-run of a phase reads anew (a clock, what retrieval found, the
#: context it rendered). A keyed store holding them would fail as a mismatch when re-run,
#: so a phase that meets a mismatch reads the values its earlier run stored and sends
#: those (see ``Phases.store_turn_phase``).
RUN_FIELDS: Final = ("started_at", "ended_at", "retrieved_entity_ids", "injected_context_chars")


class RunFields(NamedTuple):
    """The values of :data:`RUN_FIELDS` one run of a phase writes (``None``: not written)."""

    started_at: str | None = None
    ended_at: str | None = None
    retrieved_entity_ids: tuple[str, ...] | None = None
    injected_context_chars: int | None = None
    #: this turn's user store created the conversation entity, so its closing store gives
    #: the conversation its ``started_at`` (kept on the closing observation, undeclared,
    #: so that a re-run, whose user store replays and cannot tell, does the same)
    started_conversation: bool = False

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> RunFields:
        """The run fields an observation of a turn record holds."""
        ids = fields.get("retrieved_entity_ids")
        chars = fields.get("injected_context_chars")
        started, ended = fields.get("started_at"), fields.get("ended_at")
        return cls(
            started if isinstance(started, str) else None,
            ended if isinstance(ended, str) else None,
            tuple(str(i) for i in ids) if isinstance(ids, list) else None,
            chars if isinstance(chars, int) and not isinstance(chars, bool) else None,
            fields.get(STARTED_CONVERSATION_FIELD) is True,
        )


_NO_RUN_FIELDS: Final = RunFields()


def turn_record(
    keys: TurnKeys,
    status: TurnStatus,
    error_class: str | None = None,
    *,
    repair_reason: str | None = None,
    harness: str | None = None,
    model: str | None = None,
    run: RunFields = _NO_RUN_FIELDS,
    tool_count: int | None = None,
    stored_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The ``conversation_turn`` record, keyed by ``(session_id, turn_id)``.

    ``status`` is a declared ``last_write`` field, so its latest value is what an audit reads:
    ``open`` after the enter store, ``completed`` or ``abandoned`` after the closing one.
    ``error_class`` is only written (and only meaningful) with ``abandoned``; a repair that
    closes the turn passes ``repair_reason`` (``safety_net_used: true`` and its reason).

    The other declared fields a real Inspector shows are written when given, never as
    ``null`` (every field is ``last_write``, and a winning ``null`` would clear what the
    other phase wrote): ``harness`` (the memory's platform), ``model``, the ``run`` fields
    (``started_at`` by the enter store, and the same value again by the closing one when it
    knows it; ``ended_at``, ``retrieved_entity_ids`` and ``injected_context_chars`` by the
    closing one), ``tool_invocation_count`` and
    ``stored_entity_ids`` (the entities the reply produced).
    """
    record: dict[str, Any] = {
        "entity_type": "conversation_turn",
        "session_id": keys.conversation_id,
        "turn_id": keys.turn_id,
        "turn_key": keys.user_turn_key,
        "status": status,
    }
    if harness is not None:
        record["harness"] = harness
    if model is not None:
        record["model"] = model
    if run.started_at is not None:
        record["started_at"] = run.started_at
    if run.ended_at is not None:
        record["ended_at"] = run.ended_at
    if tool_count is not None:
        record["tool_invocation_count"] = tool_count
    if run.retrieved_entity_ids is not None:
        record["retrieved_entity_ids"] = list(run.retrieved_entity_ids)
    if stored_ids is not None:
        record["stored_entity_ids"] = list(stored_ids)
    if run.injected_context_chars is not None:
        record["injected_context_chars"] = run.injected_context_chars
    if run.started_conversation:
        record[STARTED_CONVERSATION_FIELD] = True
    if error_class is not None:
        record[ERROR_CLASS_FIELD] = error_class
    if repair_reason is not None:
        record[REPAIRED_FIELD] = True
        record[REASON_FIELD] = repair_reason
    return record


def _edge(rtype: str, source: int | str, target: int | str) -> dict[str, Any]:
    edge: dict[str, Any] = {"relationship_type": rtype}
    if isinstance(source, int):
        edge["source_index"] = source
    else:
        edge["source_entity_id"] = source
    if isinstance(target, int):
        edge["target_index"] = target
    else:
        edge["target_entity_id"] = target
    return edge


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _refers_to(source: int | str, targets: Iterable[str]) -> list[dict[str, Any]]:
    return [_edge("REFERS_TO", source, t) for t in _unique(targets) if t != source]


def user_payload(
    settings: ConversationSettings,
    keys: TurnKeys,
    user_message: str,
    *,
    turn_number: int | None = None,
    user_extra: Mapping[str, Any] | None = None,
    refers_to: Sequence[str] = (),
    model: str | None = None,
    run: RunFields = _NO_RUN_FIELDS,
) -> StorePayload:
    """The enter store: conversation, user message, turn record ``open``, PART_OF.

    ``refers_to`` is only non-empty with ``refers_to_on_enter``; by default the user
    message's REFERS_TO edges ride on the closing store. The turn record gets the
    harness, the ``model`` and ``run.started_at``.
    """
    entities = (
        conversation_entity(keys.conversation_id, settings),
        message_entity(
            "user", user_message, keys.user_turn_key, turn_number=turn_number, extra=user_extra
        ),
        turn_record(keys, "open", harness=settings.platform, model=model, run=run),
    )
    relationships = [_edge("PART_OF", 1, 0), *_refers_to(1, refers_to)]
    return StorePayload(
        entities=entities,
        relationships=tuple(relationships),
        idempotency_key=keys.idempotency_key("user"),
        conversation_index=0,
        user_index=1,
        turn_record_index=2,
    )


def _reply_part(
    settings: ConversationSettings,
    keys: TurnKeys,
    reply: str,
    record: dict[str, Any],
    conversation_entity_id: str | None,
    turn_number: int | None,
    refers_to: Sequence[str],
    conversation_started_at: str | None = None,
) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]], dict[str, int]]:
    # The assistant message, PART_OF the conversation (by id, or by index to the entity when
    # the id is unknown or the entity is written here anyway), REFERS_TO ``refers_to``; and
    # the turn record.
    entities: list[Mapping[str, Any]] = []
    indexes: dict[str, int] = {}
    conversation: int | str
    if conversation_entity_id is None or conversation_started_at is not None:
        indexes["conversation_index"] = len(entities)
        entities.append(
            conversation_entity(keys.conversation_id, settings, conversation_started_at)
        )
        conversation = indexes["conversation_index"]
    else:
        conversation = conversation_entity_id
    assistant = indexes["assistant_index"] = len(entities)
    entities.append(
        message_entity("assistant", reply, keys.assistant_turn_key, turn_number=turn_number)
    )
    indexes["turn_record_index"] = len(entities)
    entities.append(record)
    relationships = [_edge("PART_OF", assistant, conversation), *_refers_to(assistant, refers_to)]
    return entities, relationships, indexes


def closing_payload(
    settings: ConversationSettings,
    keys: TurnKeys,
    reply: str,
    *,
    conversation_entity_id: str | None,
    user_message_id: str | None,
    retrieved_ids: Sequence[str] = (),
    cited_ids: Sequence[str] = (),
    turn_number: int | None = None,
    produced: Sequence[Produced] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    model: str | None = None,
    run: RunFields = _NO_RUN_FIELDS,
    started_at: str | None = None,
    error_class: str | None = None,
    idempotency_key: str | None = None,
) -> StorePayload:
    """The closing store of a turn: completed, or abandoned with ``error_class``.

    Completed: the assistant message (exact reply) PART_OF the conversation and REFERS_TO
    the retrieved and cited entities and to each ``produced`` entity (written in this same
    store); the user message (named by id) REFERS_TO the retrieved entities; the turn
    record becomes ``completed`` and REFERS_TO each of ``tools`` (``tool_invocation``
    elements, see :func:`neotoma_agent._records.tools.tool_entity`), written here too.

    Abandoned: the turn record becomes ``abandoned`` with the error class, the user message
    keeps its REFERS_TO edges, and when the user already saw part of a reply (``reply`` is
    non-empty) the assistant message holds exactly that text: both halves or neither.
    What the turn produced before it failed (a tool's result) happened, so it is stored
    too, REFERS_TO from the partial reply, or from the turn record when there is none; so
    are the tool calls it made, REFERS_TO from the turn record. ``idempotency_key``: the
    content key of a second, different abandonment (``None``: the phase's own).
    """
    status: TurnStatus = "completed" if error_class is None else "abandoned"
    record = _closing_record(keys, status, error_class, settings, model, run, tools, produced)
    conversation_started_at = started_at if run.started_conversation else None
    if error_class is None or reply:
        entities, relationships, indexes = _reply_part(
            settings,
            keys,
            reply,
            record,
            conversation_entity_id,
            turn_number,
            [*retrieved_ids, *cited_ids],
            conversation_started_at,
        )
    elif conversation_started_at is not None:
        entities = [
            conversation_entity(keys.conversation_id, settings, conversation_started_at),
            record,
        ]
        relationships, indexes = [], {"conversation_index": 0, "turn_record_index": 1}
    else:
        entities, relationships, indexes = [record], [], {"turn_record_index": 0}
    if user_message_id is not None:
        relationships += _refers_to(user_message_id, retrieved_ids)
    source = indexes.get("assistant_index", indexes["turn_record_index"])
    produced_indexes = _add_produced(entities, relationships, source, produced)
    tool_indexes = _add_tools(entities, relationships, indexes["turn_record_index"], tools)
    return StorePayload(
        entities=tuple(entities),
        relationships=tuple(relationships),
        idempotency_key=idempotency_key
        or keys.idempotency_key("assistant" if error_class is None else "abandoned"),
        produced_indexes=produced_indexes,
        tool_indexes=tool_indexes,
        **indexes,
    )


def _closing_record(
    keys: TurnKeys,
    status: TurnStatus,
    error_class: str | None,
    settings: ConversationSettings,
    model: str | None,
    run: RunFields,
    tools: Sequence[Mapping[str, Any]],
    produced: Sequence[Produced],
) -> dict[str, Any]:
    # The closing turn record: what the close knows (started_at only as the enter wrote it;
    # a close that does not know it, e.g. of a turn opened in another process, sends none).
    return turn_record(
        keys,
        status,
        error_class,
        harness=settings.platform,
        model=model,
        run=run,
        tool_count=len(tools),
        stored_ids=[p.entity_id for p in produced],
    )


def _add_produced(
    entities: list[Mapping[str, Any]],
    relationships: list[dict[str, Any]],
    source: int,
    produced: Sequence[Produced],
) -> tuple[int, ...]:
    # Produced entities go after the turn's own, each REFERS_TO from ``source``.
    indexes = []
    for item in produced:
        indexes.append(len(entities))
        entities.append(item.entity)
        relationships.append(_edge("REFERS_TO", source, indexes[-1]))
    return tuple(indexes)


def _add_tools(
    entities: list[Mapping[str, Any]],
    relationships: list[dict[str, Any]],
    record: int,
    tools: Sequence[Mapping[str, Any]],
) -> tuple[int, ...]:
    # Tool calls go last, each REFERS_TO from the turn record (as the real Inspector's
    # writers link them).
    start = len(entities)
    entities.extend(tools)
    relationships.extend(_edge("REFERS_TO", record, i) for i in range(start, len(entities)))
    return tuple(range(start, len(entities)))


def recorded_payload(
    settings: ConversationSettings,
    keys: TurnKeys,
    user_message: str,
    assistant_message: str,
    *,
    retrieved_ids: Sequence[str] = (),
    cited_ids: Sequence[str] = (),
    turn_number: int | None = None,
    user_extra: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    model: str | None = None,
    started_at: str | None = None,
) -> StorePayload:
    """A whole turn in one store (transcript import): the same graph ``turn()`` leaves.

    No clock reading and no retrieval result is written (an import's clock is not the
    turn's, and a re-import must replay): only a ``started_at`` the turn id carries.
    """
    entities: list[Mapping[str, Any]] = [
        conversation_entity(keys.conversation_id, settings),
        message_entity(
            "user", user_message, keys.user_turn_key, turn_number=turn_number, extra=user_extra
        ),
        message_entity(
            "assistant", assistant_message, keys.assistant_turn_key, turn_number=turn_number
        ),
        turn_record(
            keys,
            "completed",
            harness=settings.platform,
            model=model,
            run=RunFields(started_at=started_at),
            # Only when there are calls: an import of a plain transcript sends what earlier
            # versions sent, so re-importing into a store they wrote still replays.
            tool_count=len(tools) or None,
        ),
    ]
    relationships = [
        _edge("PART_OF", 1, 0),
        _edge("PART_OF", 2, 0),
        *_refers_to(1, retrieved_ids),
        *_refers_to(2, [*retrieved_ids, *cited_ids]),
    ]
    tool_indexes = _add_tools(entities, relationships, 3, tools)
    return StorePayload(
        entities=tuple(entities),
        relationships=tuple(relationships),
        idempotency_key=keys.idempotency_key("recorded"),
        conversation_index=0,
        user_index=1,
        assistant_index=2,
        turn_record_index=3,
        tool_indexes=tool_indexes,
    )
