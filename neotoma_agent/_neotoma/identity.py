"""Neotoma entity identity, computed exactly as a Neotoma server computes it.

Pure functions only (no I/O, no async). Both the embedded store and the HTTP
transport use this module, so an entity stored locally gets the same
``entity_id`` and ``canonical_name`` that a real server (0.22.0) would assign.

The behaviour mirrors the server's ``entity_resolution.ts``
(``normalizeEntityValue``, ``formatCanonicalNameForStorage``,
``deriveCanonicalNameFromFieldsWithTrace``, ``generateEntityId``), its
built-in schema defaults and its entity-type equivalence check, including the
quirks real servers show (see ``tests/data/identity-vectors.json``):

* honorifics are removed even inside schema-rule names, and the regex leaves
  the dot behind: ``person {name: "Dr. Ana Lopez"}`` -> ``person:. Ana Lopez``;
* ``company`` and ``contact`` declare a legacy composite that needs all five
  fields, so in practice they resolve through the heuristic ``name`` key;
* names that look like ``word:...`` (``^\\w+:``) keep their punctuation.

JavaScript semantics are reproduced where Python differs: ASCII ``\\w``/``\\b``,
JavaScript whitespace for ``trim``/``\\s``, ``String(value)`` and
``JSON.stringify`` number formatting, UTF-16 key sorting and the
integer-keys-first property order of JavaScript objects.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple

from .js import (
    JS_WS_CLASS,
    hash_uuid,
    js_json,
    js_key_order,
    js_string,
    js_trim,
    utf16_sort_key,
)
from .schema_table import SCHEMA_ROWS, SchemaRow

__all__ = [
    "ENTITY_ID_RE",
    "LAST_WRITE",
    "META_FIELDS",
    "Identity",
    "IdentityError",
    "MergePolicy",
    "TypeSchema",
    "entity_id_for",
    "format_canonical_name",
    "hash_uuid",
    "js_json",
    "normalize",
    "resolve_entity_type",
    "resolve_identity",
    "schema_for",
    "schema_version",
]

Strategy = Literal["last_write", "highest_priority", "merge_array", "most_specific"]
TieBreaker = Literal["observed_at", "source_priority"]
CollisionPolicy = Literal["merge", "reject", "warn"]
IdentityBasis = Literal["schema_rule", "heuristic_name", "heuristic_fallback", "target_id"]
#: One ``canonical_name_fields`` entry: a single field, or a composite of fields.
CanonicalNameRule = str | tuple[str, ...]

#: Valid Neotoma entity ids. ``\Z`` (not ``$``) so ``.match`` refuses a trailing newline.
ENTITY_ID_RE: Final[re.Pattern[str]] = re.compile(r"^ent_[0-9a-f]{24}\Z")

# `\S+@\S+` anywhere in the string is equivalent to one non-space on each side of an "@".
_EMAIL_RE: Final = re.compile(f"[^{JS_WS_CLASS}]@[^{JS_WS_CLASS}]")
_ID_DERIVED_RE: Final = re.compile(r"\w+:", re.ASCII)
_PUNCT_RE: Final = re.compile(r"""[-.,;:!?'"()\[\]{}_/\\]+""")
_WS_RUN_RE: Final = re.compile(f"[{JS_WS_CLASS}]+")

_COMPANY_TYPES: Final = frozenset({"company", "organization"})
_PERSON_TYPES: Final = frozenset({"person", "contact"})
_EDITED_TYPES: Final = _COMPANY_TYPES | _PERSON_TYPES
# "type:value" in printable ASCII with no "@" (a bookkeeping name): every rule leaves it as is.
_PLAIN_ID_NAME: Final = re.compile(r"[A-Za-z0-9_]+:[!-?A-~]*")

# The patterns only some names need are compiled on first use (each compile costs a
# process that never meets them, a coding-agent hook's among them, tens of microseconds).


@functools.cache
def _company_suffix_re() -> re.Pattern[str]:
    # `sa`/`ag` are deliberately absent: the server (5a50ea965) does not strip them.
    return re.compile(
        f"[{JS_WS_CLASS}]+"
        r"(?:inc|llc|ltd|corp|corporation|co|company|limited|plc|gmbh|pty|pvt)\.?\Z",
        re.ASCII | re.IGNORECASE,
    )


@functools.cache
def _honorific_re() -> re.Pattern[str]:
    # `\.?\b` backtracks to drop only the word when the dot is followed by a space or
    # the end ("Dr. Ana" -> ". Ana"): a server quirk we must keep for identical ids.
    return re.compile(r"\b(?:mr|mrs|ms|dr|prof|sir|jr|sr|ii|iii|iv)\.?\b", re.ASCII | re.IGNORECASE)


# --------------------------------------------------------------------------
# Normalization and entity ids
# --------------------------------------------------------------------------


# Memoised: a turn normalizes the same few names again and again (each id derived, its
# tenant-scoped twin, the keys and history reads naming them).
@functools.lru_cache(maxsize=1024)
def normalize(entity_type: str, value: str) -> str:
    """Normalize a canonical name for hashing (the server's ``normalizeEntityValue``).

    In order: trim + lowercase; anything containing an email (``\\S+@\\S+``)
    is returned as is; ``company``/``organization`` lose one legal suffix
    (``Inc``, ``LLC``, ``Corp.``, ...); ``person``/``contact`` lose whole-word
    honorifics; names that are not id-derived (``id:...`` or ``word:...``) have
    punctuation runs turned into spaces; whitespace runs collapse to one space.
    """
    return _name_rules(entity_type, js_trim(value).lower())


def format_canonical_name(entity_type: str, value: str) -> str:
    """Storage form of a canonical name (``formatCanonicalNameForStorage``).

    The same rules as :func:`normalize` with the letter case kept, except that
    names containing an email are stored lowercased.
    """
    return _name_rules(entity_type, js_trim(value))


def _name_rules(entity_type: str, text: str) -> str:
    """The shared pipeline of :func:`normalize` and :func:`format_canonical_name`.

    Decisions (email? id-derived?) are taken on the lowercased text; the edits apply to
    ``text`` as given, so the caller chooses whether letter case survives.
    """
    if _PLAIN_ID_NAME.fullmatch(text) and entity_type not in _EDITED_TYPES:
        return text  # what the steps below give it (test_identity_fast_names)
    probe = text.lower()
    if _EMAIL_RE.search(probe):
        return probe
    id_derived = probe.startswith("id:") or _ID_DERIVED_RE.match(probe) is not None
    if entity_type in _COMPANY_TYPES:
        text = js_trim(_company_suffix_re().sub("", text, count=1))
    elif entity_type in _PERSON_TYPES:
        text = js_trim(_honorific_re().sub("", text))
    if not id_derived:
        text = _PUNCT_RE.sub(" ", text)
    return js_trim(_WS_RUN_RE.sub(" ", text))


def entity_id_for(entity_type: str, canonical_name: str, tenant: str | None = None) -> str:
    """``"ent_" + sha256(entity_type + ":" + normalize(entity_type, name))[:24]``.

    ``entity_type`` is used verbatim (pass the resolved type); the name is
    re-normalized, so ids are case-insensitive. With a ``tenant`` (a user id) the basis
    is prefixed ``"tenant:<tenant>:"``: Neotoma's tenant-scoped ids, one entity per user.
    """
    basis = f"{entity_type}:{normalize(entity_type, canonical_name)}"
    if tenant is not None:
        basis = f"tenant:{tenant}:{basis}"
    return "ent_" + hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# --------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------


# The records of this module are plain classes, not attrs: every process that stores an
# entity imports it (a coding-agent hook among them, a fresh process per event, where each
# attrs class costs its generated methods), and none of them validates anything.


class MergePolicy(NamedTuple):
    """How a snapshot field is reduced across observations."""

    strategy: Strategy
    #: ``"source_priority"`` breaks ties by observation id ascending, not by recency.
    tie_breaker: TieBreaker = "observed_at"


#: The merge policy of a field a schema gives none (the server's default).
LAST_WRITE: Final = MergePolicy("last_write")


#: Payload keys that are never a schema field, so never "unknown" (``NON_SCHEMA_META_KEYS``).
META_FIELDS: Final = frozenset({"canonical_name", "schema_version", "_deleted"})


class TypeSchema:
    """Identity and reduction rules of a built-in entity type.

    ``canonical_name_fields`` entries are field names (``"title"``) or composite
    tuples (``("session_id", "turn_id")``). As on the server, a list made only
    of strings is a *legacy single composite* (every field required, values
    joined by ``|``); a list containing any tuple is ordered rules, first fully
    present rule wins.
    """

    __slots__ = (
        "aliases",
        "canonical_name_fields",
        "content_field",
        "entity_type",
        "fields",
        "merge_policies",
        "name_collision_policy",
        "required",
        "strict",
        "version",
    )

    entity_type: str
    canonical_name_fields: tuple[CanonicalNameRule, ...]
    name_collision_policy: CollisionPolicy
    merge_policies: Mapping[str, MergePolicy]
    aliases: tuple[str, ...]
    #: the fields the schema declares; ``None`` where this port does not list them (every
    #: field is then kept in snapshots, as for a type without a schema)
    fields: frozenset[str] | None
    #: declared ``required`` fields (a store without one is accepted, with a warning)
    required: tuple[str, ...]
    version: str
    #: the field holding the entity's prose (a store without it gets a warning)
    content_field: str | None
    #: ``canonical_name_strict``: when no rule matches, refuse instead of using heuristics
    strict: bool

    def __init__(
        self,
        entity_type: str,
        canonical_name_fields: tuple[CanonicalNameRule, ...],
        name_collision_policy: CollisionPolicy = "merge",
        merge_policies: Mapping[str, MergePolicy] | None = None,
        aliases: tuple[str, ...] = (),
        fields: Iterable[str] | None = None,
        required: tuple[str, ...] = (),
        version: str = "1.0",
        content_field: str | None = None,
        strict: bool = False,
    ) -> None:
        self.entity_type = entity_type
        self.canonical_name_fields = canonical_name_fields
        self.name_collision_policy = name_collision_policy
        self.merge_policies = MappingProxyType(dict(merge_policies or {}))
        self.aliases = aliases
        self.fields = None if fields is None else frozenset(fields)
        self.required = required
        self.version = version
        self.content_field = content_field
        self.strict = strict

    def __repr__(self) -> str:
        return f"TypeSchema({self.entity_type!r}, version={self.version!r})"

    def declares(self, field: str) -> bool:
        """True when a snapshot keeps ``field`` (undeclared ones stay on observations).

        Only the schema's own fields: a ``canonical_name`` sent with an entity is never
        "unknown" (see :data:`META_FIELDS`), but a declared type's snapshot drops it.
        """
        return self.fields is None or field in self.fields

    @property
    def is_legacy_composite(self) -> bool:
        """True when ``canonical_name_fields`` is the all-fields-required legacy shape."""
        return all(isinstance(rule, str) for rule in self.canonical_name_fields)

    def policy(self, field: str) -> MergePolicy:
        """Merge policy of ``field``; ``last_write`` unless the schema declares one."""
        return self.merge_policies.get(field, LAST_WRITE)


def _highest(*fields: str, tie_breaker: TieBreaker = "observed_at") -> dict[str, MergePolicy]:
    return {f: MergePolicy("highest_priority", tie_breaker) for f in fields}


def _merge_array(*fields: str) -> dict[str, MergePolicy]:
    return {f: MergePolicy("merge_array") for f in fields}


def _schema(row: SchemaRow) -> TypeSchema:
    etype, version, rules, collision, strict, policies, fields, required, content = row
    return TypeSchema(
        etype,
        rules,
        collision,  # type: ignore[arg-type]  # the registry holds merge | reject | warn
        {f: MergePolicy(s, t) for f, s, t in policies},  # type: ignore[arg-type]
        fields=fields,
        required=required,
        version=version,
        content_field=content,
        strict=strict,
    )


# Every type a 0.22.0 server declares, in its registry's order (see ``_neotoma.schema_table``): the
# server resolves identities with the registry row, and only their fields reach snapshots.
# A row becomes its TypeSchema on first use: a process stores a few of the 88 types.
_ROWS: Final[Mapping[str, SchemaRow]] = MappingProxyType({row[0]: row for row in SCHEMA_ROWS})
_BUILT: Final[dict[str, TypeSchema]] = {}


def _declared(entity_type: str) -> TypeSchema | None:
    """The built-in schema declared under exactly ``entity_type`` (one object per type), or
    None."""
    schema = _BUILT.get(entity_type)
    if schema is None:
        row = _ROWS.get(entity_type)
        if row is None:
            return None
        schema = _BUILT.setdefault(entity_type, _schema(row))
    return schema


# entity_type_guard.ts: words ending in "s" that are not plurals.
_IRREGULAR_SINGULAR: Final = frozenset(
    {
        "news", "data", "analytics", "status", "address", "access", "success", "progress",
        "process", "analysis", "basis", "thesis", "diagnosis", "species", "series", "means",
        "ethics", "economics", "physics", "mathematics", "politics", "statistics",
        "athletics", "kudos", "bonus", "corpus", "focus", "genius", "campus", "chaos",
        "cosmos", "virus", "sinus", "census", "bias",
    }
)  # fmt: skip


@functools.cache
def _plural_res() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    # -ies, a sibilant's -es, a plain -s (read only for a type that is not declared).
    return re.compile(r"[^aeiou]ies\Z"), re.compile(r"(?:s|x|z|ch|sh)es\Z"), re.compile(r"[a-z]s\Z")


def _singular_form(name: str) -> str:
    """The server's ``suggestSingular`` heuristic, or ``name`` when it has none."""
    if name in _IRREGULAR_SINGULAR:
        return name
    ies, sibilant_es, plural_s = _plural_res()
    if ies.search(name):
        return name[:-3] + "y"
    if sibilant_es.search(name):
        return name[:-2]
    if plural_s.search(name) and not name.endswith("ss"):
        return name[:-1]
    return name


@functools.lru_cache(maxsize=1)
def _equivalence() -> tuple[tuple[str, str], ...]:
    """(lowercase name, singular form) of each declared type, in registry order (read only
    for a type that is not declared)."""
    return tuple((name, _singular_form(name)) for name in _ROWS)


@functools.lru_cache(maxsize=1024)
def resolve_entity_type(entity_type: str) -> str:
    """Rewrite an unregistered type to the declared type it is equivalent to.

    Mirrors the store's equivalence check (``entity_type_equivalence.ts`` over the schema
    registry): a type matching a declared one case-insensitively (``"Company"``) or by
    singular form (``"companies"`` -> ``company``) is rewritten to the first such type in
    registry order; declared and unknown types are returned verbatim. Declared aliases do
    not rewrite (the registry rows carry none): ``todo`` and ``turn_compliance`` stay types
    of their own on a 0.22.0 server.
    """
    if entity_type in _ROWS:
        return entity_type
    key = js_trim(entity_type).lower()
    if not key:
        return entity_type
    singular = _singular_form(key)
    for name, name_singular in _equivalence():
        if key == name or singular == name_singular:
            return name
    return entity_type


def schema_for(entity_type: str) -> TypeSchema | None:
    """Built-in schema of ``entity_type`` (after :func:`resolve_entity_type`), or None."""
    resolved = resolve_entity_type(entity_type)
    schema = _declared(resolved)
    if schema is None:
        # The server's code-default lookup also tries lower_snake_case.
        schema = _declared(_WS_RUN_RE.sub("_", js_trim(resolved).lower()))
    return schema


def schema_version(entity_type: str) -> str:
    """The ``schema_version`` a snapshot of ``entity_type`` reports (``1.0`` without a schema)."""
    row = _ROWS.get(entity_type)
    return row[1] if row is not None else "1.0"


# --------------------------------------------------------------------------
# canonical_name derivation
# --------------------------------------------------------------------------

_NAME_KEYS: Final = ("canonical_name", "name", "full_name", "title", "email", "url")
_ID_KEYS: Final = (
    "message_id", "turn_key", "thread_id", "external_id", "source_id", "id", "uuid",
    "company_id", "person_id", "contact_id",
)  # fmt: skip
# Metadata fields never used by the last-resort heuristic.
_FALLBACK_REJECT_KEYS: Final = frozenset(
    {
        "contact_type", "entity_type", "type", "status", "created_at", "updated_at",
        "created_date", "updated_date", "schema_version", "import_date",
        "import_source_file", "source", "source_name", "data_source", "origin", "currency",
        "currency_code", "category",
    }
)  # fmt: skip


@functools.cache
def _fallback_reject_value_re() -> re.Pattern[str]:
    # Dates, "1.0"-style versions and plain numbers are not names (read only by the
    # last-resort heuristic).
    return re.compile(r"\d{4}-\d{2}-\d{2}|\d+\.\d+\Z|\d+\Z", re.ASCII)


# Generic tokens that would collapse unrelated entities into one.
_REJECTED_VALUES: Final = frozenset(
    {
        "usd", "eur", "gbp", "jpy", "cny", "inr", "cad", "aud", "chf", "mxn", "brl", "zar",
        "nzd", "sek", "nok", "dkk", "krw", "sgd", "hkd", "twd",
        "unknown", "null", "none", "n/a", "na", "tbd", "undefined", "other", "misc",
        "active", "inactive", "pending", "complete", "completed", "cancelled", "draft",
        "approved", "rejected", "open", "closed", "true", "false", "yes", "no",
    }
)  # fmt: skip


def _is_rejected_value(value: str) -> bool:
    token = js_trim(value).lower()
    return not token or token in _REJECTED_VALUES


class IdentityError(Exception):
    """No safe canonical name can be derived (``ERR_CANONICAL_NAME_UNRESOLVED``)."""

    code: str = "ERR_CANONICAL_NAME_UNRESOLVED"

    def __init__(
        self, entity_type: str, seen_fields: list[str], attempted_value: str | None = None
    ) -> None:
        preview = (
            f' (derivation landed on "{attempted_value}", a rejected token)'
            if attempted_value
            else ""
        )
        seen = (
            f" Seen fields: {', '.join(seen_fields)}."
            if seen_fields
            else " No usable name/identifier fields were provided."
        )
        self.message: str = (
            f'Cannot derive canonical_name for "{entity_type}"{preview}. '
            f"Declare `canonical_name_fields` on the {entity_type} schema to make this "
            "deterministic, or supply one of: canonical_name, name, full_name, title, "
            f"email, url.{seen}"
        )
        self.entity_type: str = entity_type
        self.details: dict[str, Any] = {
            "seen_fields": list(seen_fields),
            "attempted_value": attempted_value,
        }
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickling replays __init__ with self.args, which is the message here.
        details = self.details
        return (type(self), (self.entity_type, details["seen_fields"], details["attempted_value"]))


class Identity(NamedTuple):
    """Where a stored entity lands, and which rule put it there."""

    entity_type: str
    canonical_name: str
    entity_id: str
    identity_basis: IdentityBasis
    identity_rule: str
    #: Resolver trace without the store's trailing ``existing_row:*`` step.
    resolver_path: tuple[str, ...]

    @property
    def from_schema_rule(self) -> bool:
        """True when a schema ``canonical_name_fields`` rule produced the name.

        Such matches are deterministic: ``name_collision_policy: reject`` and
        ``strict`` never refuse them.
        """
        return self.identity_basis == "schema_rule"

    def in_tenant(self, tenant: str | None) -> Identity:
        """This identity with its id scoped to ``tenant`` (itself when None)."""
        if tenant is None:
            return self
        return _in_tenant(self, tenant)


# Memoised whole: a user's turn scopes its conversation's, messages' and record's
# identities again and again (the unscoped ones are memoised with their identities), and
# a hit then costs one hash of the identity, not a new id nor a new tuple.
@functools.lru_cache(maxsize=4096)
def _in_tenant(identity: Identity, tenant: str) -> Identity:
    scoped = entity_id_for(identity.entity_type, identity.canonical_name, tenant)
    return identity._replace(entity_id=scoped)


def _rule_value(fields: Mapping[str, Any], field: str) -> str | None:
    value = fields.get(field)
    if value is None:
        return None
    text = js_trim(js_string(value))
    return text or None


#: One canonical-name rule, ready to apply: its field names (all required), the resolver
#: step and the identity rule it reports.
_Rule = tuple[tuple[str, ...], str, str]


@functools.lru_cache(maxsize=256)
def _rules(canonical_name_fields: tuple[CanonicalNameRule, ...]) -> tuple[_Rule, ...]:
    """A schema's ``canonical_name_fields`` as rules to try in order (built once per schema:
    every store resolves identities, and the labels depend only on the schema)."""
    if not canonical_name_fields:
        return ()
    if all(isinstance(rule, str) for rule in canonical_name_fields):
        # The legacy shape: one composite of every listed field.
        names = tuple(str(rule) for rule in canonical_name_fields)
        return (
            (
                names,
                f"schema:canonical_name_fields:{','.join(names)}",
                f"composite:{'+'.join(names)}",
            ),
        )
    out: list[_Rule] = []
    for rule in canonical_name_fields:
        if isinstance(rule, str):
            out.append(((rule,), f"schema:canonical_name_fields:{rule}", rule))
        else:
            label = f"composite:{'+'.join(rule)}"
            out.append((tuple(rule), f"schema:canonical_name_fields:{label}", label))
    return tuple(out)


def _from_schema(
    entity_type: str, fields: Mapping[str, Any], schema: TypeSchema
) -> tuple[str, str, str] | None:
    """(canonical_name, resolver step, identity_rule) of the first matching rule."""
    for names, step, rule in _rules(schema.canonical_name_fields):
        parts: list[str] = []
        for name in names:
            part = _rule_value(fields, name)
            if part is None:
                break
            parts.append(part)
        else:
            if parts:
                text = f"{entity_type}:{'|'.join(parts)}"
                return format_canonical_name(entity_type, text), step, rule
    return None


@functools.lru_cache(maxsize=256)
def identity_keys(entity_type: str) -> frozenset[str] | None:
    """The fields that can decide ``entity_type``'s identity, or None when any field can.

    For a type with a schema: its canonical-name fields, the name keys and the id keys (a
    field outside them matters only to the last-resort heuristic, which an entity carrying
    any of these fields never reaches). For a type without one, any string field can.
    """
    schema = schema_for(entity_type)
    if schema is None:
        return None
    keys: set[str] = set(_NAME_KEYS) | set(_ID_KEYS)
    for rule in schema.canonical_name_fields:
        keys.update((rule,) if isinstance(rule, str) else rule)
    return frozenset(keys)


@functools.lru_cache(maxsize=256)
def undeclared_identity_keys(entity_type: str) -> frozenset[str]:
    """The fields that can decide ``entity_type``'s identity but that its snapshot drops (the
    schema does not declare them): a write naming the entity by one of them is renamed by
    its snapshot. Empty for a type without a schema (its snapshot keeps every field)."""
    keys = identity_keys(entity_type)
    schema = schema_for(entity_type)
    if keys is None or schema is None or schema.fields is None:
        return frozenset()
    return keys - schema.fields


_HASHABLE_SCALARS: Final = (str, int, float, bool, type(None))


def resolve_identity_cached(entity_type: str, fields: Mapping[str, Any]) -> Identity:
    """:func:`resolve_identity`, memoised for payloads that repeat (a conversation entity is
    sent on every turn, a turn record twice).

    The cache key holds only the fields that can decide the identity (``identity_keys``),
    so it is exact; payloads whose identity could come from any field are not cached.
    """
    keys = identity_keys(entity_type)
    if keys is not None:
        items = tuple(sorted((k, v) for k, v in fields.items() if k in keys))
        if items and all(isinstance(v, _HASHABLE_SCALARS) for _, v in items):
            try:
                identity = _resolve_items(entity_type, items)
            except IdentityError:
                identity = None
            # Only a name decided by those fields may be reused; the last-resort heuristic
            # looks at the others, so it is computed from the whole payload.
            if identity is not None and identity.identity_basis != "heuristic_fallback":
                return identity
    return resolve_identity(entity_type, fields)


@functools.lru_cache(maxsize=4096)
def _resolve_items(entity_type: str, items: tuple[tuple[str, Any], ...]) -> Identity:
    return resolve_identity(entity_type, dict(items))


def resolve_identity(entity_type: str, fields: Mapping[str, Any]) -> Identity:
    """Derive the identity a Neotoma server gives an entity on store.

    ``fields`` is the entity minus ``entity_type``, ``intent`` and
    ``target_id``. The type is first resolved (:func:`resolve_entity_type`);
    then, in order: the schema's ``canonical_name_fields``; the first non-empty
    string of ``canonical_name, name, full_name, title, email, url``; the
    first non-empty id field (``id:<field>:<value>``); the alphabetically first
    string field that is neither metadata nor a date/number/version.

    Raises:
        IdentityError: when nothing usable is found, or the chosen value is a
            generic token (``unknown``, ``open``, ``usd``, ...).
    """
    resolved = resolve_entity_type(entity_type)
    schema = schema_for(resolved)
    if schema is not None:
        matched = _from_schema(resolved, fields, schema)
        if matched is not None:
            name, step, rule = matched
            return Identity(
                resolved, name, entity_id_for(resolved, name), "schema_rule", rule, (step,)
            )
        if schema.strict and schema.canonical_name_fields:
            # Schema-authoritative identity: no rule matched, so no heuristic either.
            raise IdentityError(resolved, js_key_order(fields))

    raw: str | None = None
    rule = ""
    basis: IdentityBasis = "heuristic_name"
    for key in _NAME_KEYS:
        value = fields.get(key)
        if isinstance(value, str) and js_trim(value):
            raw, rule = value, f"name_key:{key}"
            break
    if raw is None:
        for key in _ID_KEYS:
            value = fields.get(key)
            if value is not None:
                text = js_string(value)
                if js_trim(text):
                    raw, rule = f"id:{key}:{text}", f"id_key:{key}"
                    break
    step = rule
    if raw is None:
        for key in sorted(fields, key=utf16_sort_key):
            value = fields[key]
            if key in _FALLBACK_REJECT_KEYS or not isinstance(value, str):
                continue
            text = js_trim(value)
            if not text or _fallback_reject_value_re().match(text) or _is_rejected_value(text):
                continue
            raw, basis = text, "heuristic_fallback"
            rule, step = f"first_string_field:{key}", f"heuristic:{key}"
            break

    if raw is None or _is_rejected_value(raw):
        raise IdentityError(resolved, js_key_order(fields), raw)

    # An explicit canonical_name is stored verbatim; it is still hashed normalized.
    name = (
        js_trim(raw) if rule == "name_key:canonical_name" else format_canonical_name(resolved, raw)
    )
    return Identity(resolved, name, entity_id_for(resolved, name), basis, rule, (step,))
