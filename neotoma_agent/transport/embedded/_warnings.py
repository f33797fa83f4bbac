"""The advisories of a store answer: undeclared fields, missing required fields, priority.

A real server (0.22.0) accepts these writes and says what it did with them; the embedded
store says the same, in the same shapes and order: ``store_warnings`` per entity in request
order, and for each entity a missing content field, its unknown fields in payload order,
its missing required fields in schema order, then the priority advisory. Warnings name
fields, never values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._neotoma.identity import META_FIELDS, TypeSchema

__all__ = ["Advisories", "advise"]

_UNKNOWN_HINT: Final = (
    "Undeclared fields are preserved on the observation but excluded from the entity "
    "snapshot. To promote them, call update_schema_incremental to add the fields to the "
    "schema, then set migrate_existing: true to backfill existing observations. If an "
    "existing declared field already fits the data, prefer correct()-ing into that field."
)
# The server's default priority: a write at it outranks any explicit lower one.
_DEFAULT_PRIORITY: Final = 100


def _unknown(entity_type: str, field: str) -> str:
    return (
        f'{entity_type} stored with field "{field}" that is not declared on its active '
        "schema. The value is preserved on the observation but is dropped from the entity "
        "snapshot until the field is added to the schema. To surface it: re-store or "
        "correct() the data into an already-declared field, or add the field via "
        "register_schema (or update_schema_incremental when the schema declares "
        "canonical_name_fields)."
    )


def _no_content(entity_type: str, field: str) -> str:
    return (
        f'{entity_type} stored without its primary content field "{field}". For '
        "document-derived entities, include the full original markdown/prose in this field; "
        "structured fields complement it but do not replace it."
    )


def _missing(entity_type: str, field: str) -> str:
    return (
        f'{entity_type} stored without required field "{field}". The schema marks this '
        "field required; the write was accepted but the entity is incomplete. Use correct() "
        "to supply the missing field."
    )


def _escalation(entity_type: str, summary: str) -> str:
    p = _DEFAULT_PRIORITY
    return (
        f"{entity_type} written at the default source_priority {p} into field(s) that rank "
        f"by priority \u2014 {summary}. A default/non-explicit priority {p} OUTRANKS any "
        "prior observation written with an explicit lower priority (e.g. a trusted import "
        "at 50), silently escalating this write's trust. Note: an explicit source_priority "
        "of 100 is indistinguishable from the default at write time, so this advisory fires "
        "on both. To make ranking intentional, pass an explicit --source-priority (CLI) / "
        "source_priority (API) reflecting how this write should rank against others \u2014 "
        "see docs/subsystems/conflict_resolution.md."
    )


class Advisories:
    """What a store answer adds about its entities (empty when all is declared and present)."""

    # A plain class: every store on the file makes one (a coding-agent hook's among them).
    __slots__ = ("required_missing", "unknown_fields", "warnings")

    def __init__(self) -> None:
        self.warnings: list[dict[str, Any]] = []
        self.unknown_fields: list[str] = []
        self.required_missing: list[dict[str, Any]] = []

    def add_to(self, response: dict[str, Any]) -> None:
        """Set the answer's keys, each only when it has something to say (as the server)."""
        if self.warnings:
            response["store_warnings"] = self.warnings
        if self.unknown_fields:
            response["unknown_fields"] = self.unknown_fields
            response["unknown_fields_count"] = len(self.unknown_fields)
            response["hint"] = _UNKNOWN_HINT
        if self.required_missing:
            response["required_fields_missing"] = self.required_missing


def _missing_value(value: object) -> bool:
    return value is None or value == ""


def advise(
    advisories: Advisories,
    index: int,
    entity_type: str,
    entity_id: str,
    fields: Mapping[str, Any],
    schema: TypeSchema | None,
    priority: int,
) -> None:
    """Add one stored entity's advisories (a type without a schema has none)."""
    if schema is None:
        return
    unknown, ranked, content, required = _name_notes(entity_type, schema, tuple(fields))
    escalates = bool(ranked) and priority == _DEFAULT_PRIORITY
    no_content = content is not None and _missing_value(fields.get(content))
    if not (unknown or escalates or no_content):
        for f in required:
            if _missing_value(fields.get(f)):
                break
        else:
            return  # the usual entity: nothing to say, and nothing built to say it
    missing = [f for f in required if _missing_value(fields.get(f))]
    where = {"observation_index": index, "entity_type": entity_type, "entity_id": entity_id}
    if no_content:
        assert content is not None
        advisories.warnings.append(
            {"code": "MISSING_CONTENT_FIELD", "message": _no_content(entity_type, content), **where}
        )
    for field in unknown:
        if field not in advisories.unknown_fields:
            advisories.unknown_fields.append(field)
        advisories.warnings.append(
            {"code": "UNKNOWN_FIELD", "message": _unknown(entity_type, field), **where}
        )
    for field in missing:
        advisories.required_missing.append(
            {"entity_type": entity_type, "field": field, "observation_index": index}
        )
        advisories.warnings.append(
            {
                "code": "MISSING_REQUIRED_FIELD",
                "message": _missing(entity_type, field),
                **where,
            }
        )
    if escalates:
        summary = ", ".join(f"'{f}' uses {strategy}" for f, strategy in ranked)
        advisories.warnings.append(
            {
                "code": "SOURCE_PRIORITY_ESCALATION",
                "message": _escalation(entity_type, summary),
                **where,
            }
        )


#: What an entity's advisories depend on besides its values, by (entity type, field
#: names): its undeclared fields, its fields ranked by priority, the type's content field
#: and required fields. Payloads of one shape repeat turn after turn.
_Notes = tuple[tuple[str, ...], Sequence[tuple[str, str]], str | None, tuple[str, ...]]
_NOTES: dict[tuple[str, tuple[str, ...]], _Notes] = {}
_MAX_NOTES = 4096


def _name_notes(entity_type: str, schema: TypeSchema, names: tuple[str, ...]) -> _Notes:
    key = (entity_type, names)
    notes = _NOTES.get(key)
    if notes is None:
        unknown: tuple[str, ...] = ()
        if schema.fields is not None:
            unknown = tuple(f for f in names if f not in META_FIELDS and not schema.declares(f))
        notes = (unknown, _ranked(names, schema), schema.content_field, tuple(schema.required))
        if len(_NOTES) >= _MAX_NOTES:
            _NOTES.clear()  # a bound, not an LRU: shapes are few in practice
        _NOTES[key] = notes
    return notes


def _ranked(fields: Sequence[str], schema: TypeSchema) -> Sequence[tuple[str, str]]:
    # Fields whose merge policy honours source_priority (the server's fieldHonorsPriority).
    out = []
    for field in fields:
        policy = schema.merge_policies.get(field)
        if policy is None:
            continue
        if policy.strategy == "highest_priority" or (
            policy.strategy == "most_specific" and policy.tie_breaker == "source_priority"
        ):
            out.append((field, policy.strategy))
    return tuple(out)
