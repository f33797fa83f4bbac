"""Turn ids, turn keys and idempotency keys: the strings that decide what merges.

A Neotoma server derives a message's entity id from its ``turn_key`` and replays a store whose
idempotency key it has seen, so these strings *are* the turn's identity. Two different turns
that produce the same key are silently merged into one; one turn that produces two keys is
stored twice. Everything here is a pure function and every id is validated before any I/O.

Key shapes::

    turn_key         {conversation_id}:{turn_id}                       user message
                     {conversation_id}:{turn_id}:assistant             assistant message
    idempotency      conversation-{cid}-{tid}-user-{digest}            enter store
                     conversation-{cid}-{tid}-assistant-{digest}       closing store (completed)
                     conversation-{cid}-{tid}-abandoned-{digest}       closing store (abandoned)
                     conversation-{cid}-{tid}-recorded-{digest}        record_turn (one store)

In the idempotency keys ``cid`` and ``tid`` are the ids *folded* the way the server folds the
user message's canonical name (``_neotoma.identity.normalize``: lowercase, whitespace runs to one
space), because ids that fold together name the same entities and must be the same turn: a
replay or a mismatch, never a second turn overwriting the first. ``digest`` is 16 hex digits
of sha256 over the folded pair as a JSON array, because ``-`` also occurs inside ids
(``a-b`` + ``c`` and ``a`` + ``b-c`` share the readable prefix, not the digest).
:func:`key_phase` reads the phase back from a key.

A ``revision`` of 2 or more appends ``-r{revision}`` to the idempotency keys (never to the
turn keys), so a regenerated reply lands on the same message entity as a new observation.
Stores written before the digest hold ``...-user-turn`` keys and are not migrated (an
identical re-run writes no observation anyway); CHANGELOG (Unreleased, Changed) says more.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from typing import Final, Literal, NamedTuple, cast

from .._neotoma.identity import ENTITY_ID_RE, normalize, resolve_identity, resolve_identity_cached
from .._neotoma.js import js_trim
from .text import SURROGATE_RE
from .user_id import tenant_for

__all__ = [
    "ENTITY_ID_RE",
    "Phase",
    "TurnKeys",
    "TurnRole",
    "conversation_entity_id",
    "fold_turn_ids",
    "key_phase",
    "message_entity_id",
    "new_turn_id",
    "parse_turn_key",
    "tenant_for",
    "turn_id_ms",
    "turn_keys",
    "turn_record_entity_id",
    "validate_conversation_id",
    "validate_entity_id",
    "validate_revision",
    "validate_turn_id",
]


# C0, DEL and C1 controls: invisible in a listing, and a terminal acts on them.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")

#: The turn id reserved by the assistant message's key.
_RESERVED_TURN_ID: Final = "assistant"

Phase = Literal["user", "assistant", "abandoned", "recorded"]
_PHASES: Final[tuple[Phase, ...]] = ("user", "assistant", "abandoned", "recorded")

#: Hex digits of the id-pair digest: 64 bits, so distinct turns do not collide in practice.
_DIGEST_CHARS: Final = 16


@functools.cache
def _key_tail_re() -> re.Pattern[str]:
    # Read from the end, where the shape is fixed: ids may themselves contain "-user-" and
    # the like. The optional last group is the content digest of the abandoned phase's
    # fallback key (NeotomaMemory appends it when an earlier run was abandoned differently).
    # Compiled on first use: only a reader of stored keys (the audit, the outbox) needs it.
    return re.compile(
        f"-(?P<phase>{'|'.join(_PHASES)})-[0-9a-f]{{{_DIGEST_CHARS}}}"
        r"(?:-r[1-9][0-9]*)?(?:-[0-9a-f]+)?\Z"
    )


_KEY_PREFIX: Final = "conversation-"

#: The entity type whose canonical name the folding is taken from (the user message's).
_MESSAGE_TYPE: Final = "conversation_message"

# Any character the fold can change or act on: outside printable ASCII, an uppercase letter,
# or whitespace (a name of printable ASCII without them folds to itself: the message's name is
# id-derived, so punctuation stays, and an email is kept as it is, already lowercase).
_FOLD_CHANGES_RE: Final = re.compile(r"[^!-@\[-~]")


def _validate_id(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{kind} must be a str, not {type(value).__name__}")
    # Both whitespace sets: the server trims JavaScript's (which has U+FEFF, so "\ufeff" is
    # an empty name it cannot store), and Python's is what users expect to be refused.
    trimmed = js_trim(value)
    if not value.strip() or not trimmed:
        raise ValueError(f"{kind} must not be empty")
    # The store trims names before hashing them, so " a" and "a" would be one entity.
    if value != value.strip() or value != trimmed:
        raise ValueError(f"{kind} must not start or end with whitespace")
    if _CONTROL.search(value):
        raise ValueError(f"{kind} must not contain control characters")
    if SURROGATE_RE.search(value):
        # Not storable (UTF-8 cannot encode it), and a key must never be half a character.
        raise ValueError(f"{kind} must be well-formed Unicode (it holds a lone surrogate)")
    return value


def validate_conversation_id(conversation_id: object) -> str:
    """Return ``conversation_id`` or raise ``ValueError`` / ``TypeError`` if it is unusable."""
    return _validate_id("conversation_id", conversation_id)


def validate_turn_id(turn_id: object) -> str:
    """Return ``turn_id`` or raise if two different turns could end up sharing its keys.

    ``:`` is refused because turn keys join with it (``c:a:b`` would be both turn ``a:b`` of
    ``c`` and turn ``b`` of ``c:a``), ``assistant`` because ``{cid}:assistant`` is another
    turn's assistant suffix, and ``|`` because the turn record's identity joins
    ``session_id|turn_id``.
    """
    value = _validate_id("turn_id", turn_id)
    if ":" in value:
        raise ValueError("turn_id must not contain ':' (turn keys are joined with ':')")
    if "|" in value:
        raise ValueError("turn_id must not contain '|' (turn records are keyed session|turn)")
    if value.lower() == _RESERVED_TURN_ID:
        raise ValueError("turn_id must not be 'assistant' (reserved by the reply's turn key)")
    return value


def validate_revision(revision: object) -> int | None:
    """Return ``revision`` (``None`` or an int >= 1) or raise ``ValueError``."""
    if revision is None:
        return None
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise TypeError(f"revision must be an int, not {type(revision).__name__}")
    if revision < 1:
        raise ValueError("revision must be >= 1")
    return revision


def validate_entity_id(entity_id: object) -> str:
    """Return ``entity_id`` if it is a Neotoma entity id (``ent_`` + 24 hex), else raise.

    A malformed id in one relationship makes the server refuse the whole store, which would
    lose the message it carries, so ids are checked when they are handed to us.
    """
    if not isinstance(entity_id, str) or not ENTITY_ID_RE.fullmatch(entity_id):
        raise ValueError(f"not a Neotoma entity id (ent_ + 24 hex digits): {entity_id!r}")
    return entity_id


# A NamedTuple, not attrs: every process that stores a turn builds it (a coding-agent hook,
# a fresh process per event, among them), and it validates nothing.
class TurnKeys(NamedTuple):
    """Every key of one turn, derived from the conversation id, turn id and revision."""

    conversation_id: str
    turn_id: str
    revision: int | None = None

    @property
    def user_turn_key(self) -> str:
        """The user message's ``turn_key``."""
        return f"{self.conversation_id}:{self.turn_id}"

    @property
    def assistant_turn_key(self) -> str:
        """The assistant message's ``turn_key``."""
        return f"{self.conversation_id}:{self.turn_id}:assistant"

    @property
    def folded(self) -> tuple[str, str]:
        """``(conversation_id, turn_id)`` folded as the server folds them (see the module)."""
        return fold_turn_ids(self.conversation_id, self.turn_id)

    def idempotency_key(self, phase: Phase) -> str:
        """The idempotency key of one store phase of this turn."""
        head, digest = _key_parts(self.conversation_id, self.turn_id)
        key = f"{head}{phase}-{digest}"
        if self.revision is not None and self.revision > 1:
            key = f"{key}-r{self.revision}"
        return key


@functools.lru_cache(maxsize=1024)
def fold_turn_ids(conversation_id: str, turn_id: str) -> tuple[str, str]:
    """The ids as they appear in the user message's normalized canonical name.

    That name (``conversation_message:{cid}:{tid}``) is what the server hashes into the
    message's entity id, so pairs that name the same user message fold equal. It is folded as
    a whole because the server's email rule looks at all of it. ``tid`` holds no ``:``
    (validated) and folding adds none, so the last ``:`` splits the pair back.

    One change on top: a final sigma is read as ``σ``. Lowercasing turns ``Σ`` into ``ς`` or
    ``σ`` depending on what follows it, which differs between the user message, the assistant
    message (``...:assistant``) and the turn record (``...|{tid}``); without this, ``(a, Σ)``
    and ``(a, σ)`` would be two turns sharing one assistant message and turn record. With it,
    pairs naming any common message or turn record get the same keys (a replay or a
    mismatch); the price is that such pairs are one turn even where no entity is shared.
    """
    turn_key = f"{conversation_id}:{turn_id}"
    if _FOLD_CHANGES_RE.search(turn_key):
        identity = resolve_identity(_MESSAGE_TYPE, {"turn_key": turn_key})
        folded = normalize(_MESSAGE_TYPE, identity.canonical_name)
        folded = folded.removeprefix(f"{_MESSAGE_TYPE}:")
    else:
        folded = turn_key  # nothing to fold: the common case, which skips the identity rules
    cid, _, tid = folded.replace("\u03c2", "\u03c3").rpartition(":")
    return cid, tid


@functools.lru_cache(maxsize=1024)
def _key_parts(conversation_id: str, turn_id: str) -> tuple[str, str]:
    """What every phase's key of a turn shares: ``conversation-{cid}-{tid}-`` and the
    pair's digest (computed once a turn, for its enter's key and its close's)."""
    cid, tid = fold_turn_ids(conversation_id, turn_id)
    # A JSON array is unambiguous where the readable "-" join is not.
    pair = json.dumps([cid, tid], ensure_ascii=False).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(pair).hexdigest()[:_DIGEST_CHARS]
    return f"{_KEY_PREFIX}{cid}-{tid}-", digest


def key_phase(idempotency_key: str) -> Phase | None:
    """The phase a turn's idempotency key belongs to, or ``None`` for any other key.

    The inverse of :meth:`TurnKeys.idempotency_key` (revisions and the abandoned phase's
    content-digest fallback included). Repair keys, keys of the older format (no digest) and
    foreign keys give ``None``.
    """
    if not idempotency_key.startswith(_KEY_PREFIX):
        return None
    match = _key_tail_re().search(idempotency_key)
    return None if match is None else cast(Phase, match["phase"])


def turn_keys(conversation_id: str, turn_id: str, revision: int | None = None) -> TurnKeys:
    """Validate the ids and return the turn's keys (``ValueError`` before any I/O)."""
    return TurnKeys(
        validate_conversation_id(conversation_id),
        validate_turn_id(turn_id),
        validate_revision(revision),
    )


_id_lock = threading.Lock()
_last_id_value = 0


def new_turn_id() -> str:
    """A fresh, time-ordered, unique turn id (UUIDv7 layout, lowercase hex with hyphens).

    48 bits of Unix milliseconds then 74 random bits, so ids sort by creation time across
    processes and restarts; within one process they strictly increase even inside one
    millisecond. A per-process counter would restart at 1 and merge a restarted agent's
    turns into its earlier ones.
    """
    global _last_id_value
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") & ((1 << 74) - 1)
    value = (ms << 74) | rand
    with _id_lock:
        if value <= _last_id_value:
            value = _last_id_value + 1
        _last_id_value = value
    rand_a = (value >> 62) & 0xFFF
    rand_b = value & ((1 << 62) - 1)
    ts = value >> 74
    as_int = (ts << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{as_int:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_UUID7_RE: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z", re.IGNORECASE
)


def turn_id_ms(turn_id: str) -> int | None:
    """The Unix milliseconds a UUIDv7 turn id carries (the default ids), else ``None``."""
    if len(turn_id) != 36 or not _UUID7_RE.match(turn_id):
        return None
    return int(turn_id[:8] + turn_id[9:13], 16)


# ------------------------------------------------------------------ the inverse of the keys
#
# Readers (``show``, the audit, the repairs) go from stored fields back to a turn and from a
# turn to the entity ids a store derives for it. These derive without I/O and without
# validating: what they read back may come from another writer whose ids our keys refuse,
# and a reader must still name it.

TurnRole = Literal["user", "assistant"]

_ASSISTANT_SUFFIX: Final = ":" + _RESERVED_TURN_ID


def parse_turn_key(
    turn_key: str, conversation_id: str | None = None
) -> tuple[str, str, TurnRole] | None:
    """``(conversation_id, turn_id, role)`` of an exact ``turn_key``; ``None`` for another shape.

    The inverse of :attr:`TurnKeys.user_turn_key` / :attr:`TurnKeys.assistant_turn_key`. Our
    turn ids hold no ``:``, so the last ``:`` splits the pair; when the caller knows the
    conversation (``conversation_id``) and the key starts with it, the split is right after
    it instead, so another writer's turn ids that hold ``:`` read back whole.
    """
    role: TurnRole = "user"
    if turn_key.endswith(_ASSISTANT_SUFFIX):
        turn_key, role = turn_key[: -len(_ASSISTANT_SUFFIX)], "assistant"
    if conversation_id is not None:
        prefix = f"{conversation_id}:"
        if turn_key.startswith(prefix) and len(turn_key) > len(prefix):
            return conversation_id, turn_key[len(prefix) :], role
    cid, sep, tid = turn_key.rpartition(":")
    if not sep or not cid or not tid:
        return None
    return cid, tid, role


# Memoised (exactly: see resolve_identity_cached): a turn's history read derives the
# conversation's id and its bound message's id on every turn, each a run of the identity rules.
def conversation_entity_id(conversation_id: str, tenant: str | None = None) -> str:
    """The ``conversation`` entity's id, derived from its ``conversation_id`` as a store does
    (``tenant``: the user its ids are scoped to, ``None`` for unscoped ids)."""
    fields = {"conversation_id": conversation_id}
    return resolve_identity_cached("conversation", fields).in_tenant(tenant).entity_id


def message_entity_id(
    conversation_id: str, turn_id: str, role: TurnRole, tenant: str | None = None
) -> str:
    """The id a store gives the ``role`` message of a turn (derived from its ``turn_key``)."""
    suffix = _ASSISTANT_SUFFIX if role == "assistant" else ""
    turn_key = f"{conversation_id}:{turn_id}{suffix}"
    identity = resolve_identity_cached(_MESSAGE_TYPE, {"turn_key": turn_key})
    return identity.in_tenant(tenant).entity_id


def turn_record_entity_id(conversation_id: str, turn_id: str, tenant: str | None = None) -> str:
    """The ``conversation_turn`` record's id, derived from ``(session_id, turn_id)``."""
    fields = {"session_id": conversation_id, "turn_id": turn_id}
    return resolve_identity_cached("conversation_turn", fields).in_tenant(tenant).entity_id
