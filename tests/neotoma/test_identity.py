"""Entity identity must match what a real Neotoma server assigns, byte for byte."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import pytest
from paths_support import ROOT, TESTS

from neotoma_agent._neotoma.identity import (
    ENTITY_ID_RE,
    Identity,
    IdentityError,
    MergePolicy,
    entity_id_for,
    format_canonical_name,
    hash_uuid,
    js_json,
    normalize,
    resolve_entity_type,
    resolve_identity,
    schema_for,
)

# ---------------------------------------------------------------------------
# Vectors recorded from a real server (0.22.0)
# ---------------------------------------------------------------------------

_VECTOR_FILE = "identity-vectors.json"
_VECTOR_CANDIDATES = (
    TESTS / "data" / _VECTOR_FILE,  # preferred: travels with the tests
    ROOT.parent / "shared" / "reference" / _VECTOR_FILE,
)


def _load_vectors() -> list[dict[str, Any]]:
    for path in _VECTOR_CANDIDATES:
        if path.is_file():
            vectors: list[dict[str, Any]] = json.loads(path.read_text("utf-8"))["vectors"]
            return vectors
    raise FileNotFoundError(f"{_VECTOR_FILE} not found in {_VECTOR_CANDIDATES}")


def _vector_id(vector: dict[str, Any]) -> str:
    fields = json.dumps(vector["fields"], ensure_ascii=False, separators=(",", ":"))
    return f"{vector['entity_type']}{fields}"


VECTORS = _load_vectors()


@pytest.mark.parametrize("vector", VECTORS, ids=[_vector_id(v) for v in VECTORS])
def test_server_vector(vector: dict[str, Any]) -> None:
    identity = resolve_identity(vector["entity_type"], vector["fields"])
    assert identity.entity_type == vector["resolved_entity_type"]
    assert identity.canonical_name == vector["canonical_name"]
    assert identity.entity_id == vector["entity_id"]
    assert identity.identity_basis == vector["identity_basis"]
    # The stored name hashes to the same id, as the store re-derives ids from it.
    assert entity_id_for(identity.entity_type, identity.canonical_name) == identity.entity_id


def test_vector_copy_matches_shared_reference() -> None:
    shared = _VECTOR_CANDIDATES[1]
    if not shared.is_file():
        pytest.skip(
            "no shared/reference/ folder beside the repository to compare "
            "tests/data/identity-vectors.json with (a maintainer's checkout has one)"
        )
    assert json.loads(_VECTOR_CANDIDATES[0].read_text("utf-8")) == json.loads(
        shared.read_text("utf-8")
    )


# Semantics §2.4 (default, unsalted).
SEMANTICS_TABLE: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "conversation",
        {"conversation_id": "chat-42", "title": "Trip"},
        "conversation:chat-42",
        "ent_f15284c1f078e824e4e9bb3b",
    ),
    (
        "conversation_message",
        {"turn_key": "chat-42:7", "role": "user", "content": "Book the Lisbon hotel"},
        "conversation_message:chat-42:7",
        "ent_e06afa0c0989fa945512a970",
    ),
    (
        "conversation_message",
        {"turn_key": "chat-42:7:assistant"},
        "conversation_message:chat-42:7:assistant",
        "ent_c89b96157e5c9e333e16e55b",
    ),
    (
        "conversation_turn",
        {"session_id": "chat-42", "turn_id": "7"},
        "conversation_turn:chat-42|7",
        "ent_8638b25e74a13fb135ed328a",
    ),
    (
        "company",
        {"name": "Acme Corp.", "website": "acme.com"},
        "Acme",
        "ent_af939bedafbd1838b259772a",
    ),
    (
        "person",
        {"name": "Ana Lopez", "email": "Ana.Lopez@Example.com"},
        "person:ana.lopez@example.com",
        "ent_c288134d4239c01f8f06b891",
    ),
    ("person", {"name": "Ana Lopez"}, "person:Ana Lopez", "ent_18dbab85f498fbd4a1164f53"),
    (
        "contact",
        {"name": "Dr. Ana Lopez", "email": "a@x.io"},
        "Ana Lopez",
        "ent_5dceb1643488d383e31753d4",
    ),
    (
        "task",
        {"title": "Send invoice", "status": "open"},
        "task:Send invoice",
        "ent_e399693024172dde25351043",
    ),
    (
        "recipe",
        {"canonical_name": "My-Pancakes_v2"},
        "My-Pancakes_v2",
        "ent_90acf70f0a002ec8705811b5",
    ),
    ("recipe", {"external_id": "R-9"}, "id:external_id:R-9", "ent_36a088dd0d612d70775504b4"),
]


@pytest.mark.parametrize(
    ("entity_type", "fields", "canonical_name", "entity_id"),
    SEMANTICS_TABLE,
    ids=[f"{t}{json.dumps(f, separators=(',', ':'))}" for t, f, _, _ in SEMANTICS_TABLE],
)
def test_semantics_table(
    entity_type: str, fields: dict[str, Any], canonical_name: str, entity_id: str
) -> None:
    identity = resolve_identity(entity_type, fields)
    assert identity.canonical_name == canonical_name
    assert identity.entity_id == entity_id
    assert ENTITY_ID_RE.match(identity.entity_id)


# Recorded store responses (shared/reference/samples): rule labels and traces.
SAMPLE_TRACES: list[tuple[str, dict[str, Any], str, str, str, tuple[str, ...]]] = [
    (
        "conversation",
        {"conversation_id": "conv-1", "title": "Conversation conv-1", "platform": "demo"},
        "ent_0029f6f8fa7224fb13a2366b",
        "schema_rule",
        "composite:conversation_id",
        ("schema:canonical_name_fields:composite:conversation_id",),
    ),
    (
        "conversation_message",
        {"role": "user", "content": "Tell me about Acme Corp", "turn_key": "conv-1:t1"},
        "ent_8ba334e4de46bb2ab3e93d94",
        "schema_rule",
        "composite:turn_key",
        ("schema:canonical_name_fields:turn_key",),
    ),
    (
        "conversation_message",
        {"role": "user", "content": "no turn key here"},
        "ent_3722a50f61aecc5458adbf3c",
        "heuristic_fallback",
        "first_string_field:content",
        ("heuristic:content",),
    ),
    (
        "conversation",
        {"title": "Conversation conv-1"},
        "ent_56302011567583ae4d003f9c",
        "heuristic_name",
        "name_key:title",
        ("name_key:title",),
    ),
    (
        "note",
        {"title": "oob"},
        "ent_8966a597dc9f1f7fd64184d1",
        "schema_rule",
        "title",
        ("schema:canonical_name_fields:title",),
    ),
    (
        "company",
        {"name": "Globex"},
        "ent_f78bce5865fece1ebbbe5334",
        "heuristic_name",
        "name_key:name",
        ("name_key:name",),
    ),
    (
        "widget_thing",
        {"name": "Sprocket"},
        "ent_1d36f332648ee209fab0640f",
        "heuristic_name",
        "name_key:name",
        ("name_key:name",),
    ),
]


@pytest.mark.parametrize(
    ("entity_type", "fields", "entity_id", "basis", "rule", "path"),
    SAMPLE_TRACES,
    ids=[f"{t}-{r}" for t, _, _, _, r, _ in SAMPLE_TRACES],
)
def test_sample_traces(
    entity_type: str,
    fields: dict[str, Any],
    entity_id: str,
    basis: str,
    rule: str,
    path: tuple[str, ...],
) -> None:
    identity = resolve_identity(entity_type, fields)
    assert (identity.entity_id, identity.identity_basis) == (entity_id, basis)
    assert (identity.identity_rule, identity.resolver_path) == (rule, path)
    assert identity.from_schema_rule is (basis == "schema_rule")


@pytest.mark.parametrize(
    ("entity_type", "fields", "canonical_name", "rule", "path"),
    [
        (
            "person",
            {"first_name": "Grace", "last_name": "Hopper", "name": "G. Hopper"},
            "person:Grace|Hopper",
            "composite:first_name+last_name",
            "schema:canonical_name_fields:composite:first_name+last_name",
        ),
        (
            "conversation_turn",
            {"session_id": "s", "turn_id": "t"},
            "conversation_turn:s|t",
            "composite:session_id+turn_id",
            "schema:canonical_name_fields:composite:session_id+turn_id",
        ),
        (
            "company",  # the legacy composite only matches with all five fields
            {
                "external_id": "X1",
                "website": "acme.com",
                "email": "HQ@Acme.com",
                "legal_name": "Acme Corporation",
                "name": "Acme",
            },
            "company:x1|acme.com|hq@acme.com|acme corporation|acme",
            "composite:external_id+website+email+legal_name+name",
            "schema:canonical_name_fields:external_id,website,email,legal_name,name",
        ),
        ("recipe", {"uuid": "u-1"}, "id:uuid:u-1", "id_key:uuid", "id_key:uuid"),
        ("person", {"phone": "+1 (555) 010"}, "person:+1 (555) 010", "phone", ""),
    ],
)
def test_rule_labels(
    entity_type: str, fields: dict[str, Any], canonical_name: str, rule: str, path: str
) -> None:
    identity = resolve_identity(entity_type, fields)
    assert identity.canonical_name == canonical_name
    assert identity.identity_rule == rule
    assert identity.resolver_path == (path or f"schema:canonical_name_fields:{rule}",)


# ---------------------------------------------------------------------------
# normalize / format_canonical_name
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entity_type", "value", "expected"),
    [
        # emails return early: dots, hyphens and suffix-like words survive
        ("person", "  Ana.Lopez-X@Example.COM ", "ana.lopez-x@example.com"),
        ("company", "Sales Inc <sales@acme.co>", "sales inc <sales@acme.co>"),
        ("recipe", "a@b", "a@b"),
        # id-derived names keep punctuation (but still collapse whitespace)
        ("recipe", "id:turn_key:Chat-1:T_7", "id:turn_key:chat-1:t_7"),
        ("task", "task:Review: Q4 (draft)!", "task:review: q4 (draft)!"),
        ("note", "key:  a-b.c", "key: a-b.c"),
        ("recipe", "https://Example.com/x?y=1", "https://example.com/x?y=1"),
        # otherwise punctuation runs become one space
        ("recipe", "Grandma's Pie (Best!)", "grandma s pie best"),
        ("recipe", "a/b\\c_d", "a b c d"),
        ("recipe", "AT&T", "at&t"),
        ("recipe", "\t Tab\tand\nnewline \u3000", "tab and newline"),
        # suffix stripping only for company/organization, one suffix, sa/ag kept
        ("company", "Acme Corp.", "acme"),
        ("organization", "Acme Ltd", "acme"),
        ("company", "Acme Co Inc", "acme co"),
        ("company", "Nestle SA", "nestle sa"),
        ("company", "Siemens AG", "siemens ag"),
        ("company", "Corp", "corp"),
        ("recipe", "Acme Corp", "acme corp"),
        ("person", "Acme Corp", "acme corp"),
        # honorifics only for person/contact, whole words, dot quirk kept
        ("person", "Dr. Ana Lopez", "ana lopez"),
        ("contact", "Mrs Smith III", "smith"),
        ("person", "Drew Mr.Smith", "drew smith"),
        ("person", "person:Dr. Ana Lopez", "person:. ana lopez"),
        ("person", "Andrew Sirois", "andrew sirois"),
        ("company", "Dr. Pepper Inc", "dr pepper"),
        ("recipe", "Mr Bean", "mr bean"),
    ],
)
def test_normalize(entity_type: str, value: str, expected: str) -> None:
    assert normalize(entity_type, value) == expected


@pytest.mark.parametrize(
    ("entity_type", "value", "expected"),
    [
        ("company", "  Hooli   Corporation  ", "Hooli"),
        ("company", "ACME CORP.", "ACME"),
        ("person", "Mr John Smith Jr.", "John Smith"),
        ("person", "person:Mr John Smith Jr.", "person: John Smith ."),
        ("recipe", "Ana.Lopez@Example.com", "ana.lopez@example.com"),
        ("recipe", "Pied-Piper", "Pied Piper"),
        ("note", "note:Tab\tand\nnewline", "note:Tab and newline"),
    ],
)
def test_format_canonical_name_keeps_case(entity_type: str, value: str, expected: str) -> None:
    assert format_canonical_name(entity_type, value) == expected


def test_normalize_uses_javascript_whitespace() -> None:
    # JavaScript trims U+FEFF but not the ASCII separators \x1c-\x1f / NEL (Python does).
    assert normalize("recipe", "\ufeffPie\ufeff") == "pie"
    assert normalize("recipe", "\x1fPie") == "\x1fpie"
    assert normalize("recipe", "Pie\x85") == "pie\x85"


def test_entity_id_is_case_insensitive_and_type_sensitive() -> None:
    base = entity_id_for("company", "Acme")
    assert entity_id_for("company", "ACME corp.") == base
    assert entity_id_for("Company", "Acme") != base  # the type is hashed verbatim
    expected = hashlib.sha256(b"company:acme").hexdigest()[:24]
    assert base == f"ent_{expected}"


def test_explicit_canonical_name_stored_verbatim_hashed_normalized() -> None:
    identity = resolve_identity("recipe", {"canonical_name": "  My-Pancakes_v2 ", "name": "x"})
    assert identity.canonical_name == "My-Pancakes_v2"
    assert identity.identity_rule == "name_key:canonical_name"
    assert identity.entity_id == entity_id_for("recipe", "my pancakes v2")


def test_schema_rule_wins_over_explicit_canonical_name() -> None:
    identity = resolve_identity("conversation", {"canonical_name": "x", "conversation_id": "c"})
    assert identity.canonical_name == "conversation:c"


def test_entity_id_re() -> None:
    assert ENTITY_ID_RE.match("ent_0123456789abcdef01234567")
    assert not ENTITY_ID_RE.match("ent_0123456789abcdef01234567\n")
    assert not ENTITY_ID_RE.match("ent_0123456789ABCDEF01234567")
    assert not ENTITY_ID_RE.match("ent_0123")


# ---------------------------------------------------------------------------
# Heuristics and rule values
# ---------------------------------------------------------------------------


def test_non_string_rule_values_stringify_like_javascript() -> None:
    expected = "ent_8638b25e74a13fb135ed328a"  # conversation_turn:chat-42|7
    for turn_id in (7, 7.0, " 7 "):
        fields = {"session_id": "chat-42", "turn_id": turn_id}
        assert resolve_identity("conversation_turn", fields).entity_id == expected
    flags = resolve_identity("conversation_turn", {"session_id": True, "turn_id": [1, None, 2.5]})
    assert flags.canonical_name == "conversation_turn:true|1,,2.5"
    big = resolve_identity("conversation_turn", {"session_id": 1e21, "turn_id": 2**53 + 1})
    assert big.canonical_name == "conversation_turn:1e+21|9007199254740992"


def test_empty_rule_values_fall_through() -> None:
    identity = resolve_identity("conversation", {"conversation_id": "  ", "session_id": "s1"})
    assert identity.canonical_name == "conversation:s1"
    identity = resolve_identity("task", {"title": "T", "project_id": None, "due_date": ""})
    assert identity.canonical_name == "task:T"


def test_name_keys_need_strings_and_id_keys_take_any_value() -> None:
    identity = resolve_identity("recipe", {"name": 42, "id": 42})
    assert identity.canonical_name == "id:id:42"
    assert identity.identity_rule == "id_key:id"
    assert identity.identity_basis == "heuristic_name"


def test_name_key_order() -> None:
    fields = {"url": "u", "email": "e@x.io", "title": "T", "full_name": "F", "name": " "}
    assert resolve_identity("recipe", fields).identity_rule == "name_key:full_name"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"b": "Beta", "a": "Alpha"}, "Alpha"),
        ({"status": "shipped", "type": "widget", "zeta": "Zed"}, "Zed"),
        ({"a_date": "2026-01-01T00:00:00Z", "b": "Bee"}, "Bee"),
        ({"a_version": "1.0", "b_count": "42", "c": "1.2.3"}, "1 2 3"),
        ({"a": "N/A", "b": " USD ", "c": "pending", "d": "Delta"}, "Delta"),
        ({"a": 1, "b": ["x"], "c": {"k": "v"}, "d": "Dee"}, "Dee"),
        ({"\uff41": "fullwidth", "\U0001f600": "emoji"}, "emoji"),  # UTF-16 order
    ],
)
def test_fallback_heuristic(fields: dict[str, Any], expected: str) -> None:
    identity = resolve_identity("gadget", fields)
    assert identity.canonical_name == expected
    assert identity.identity_basis == "heuristic_fallback"


@pytest.mark.parametrize(
    ("fields", "attempted"),
    [
        ({}, None),
        ({"status": "open"}, None),
        ({"status": "open", "currency": "EUR", "created_at": "2026-01-01"}, None),
        ({"a": "open", "b": "TBD", "c": "n/a", "d": "2026-01-01", "e": "12", "f": "1.5"}, None),
        ({"count": 3, "flag": True, "tags": ["x"], "blank": "   "}, None),
        ({"name": "Unknown", "flavor": "vanilla"}, "Unknown"),
        ({"email": " none "}, " none "),
    ],
)
def test_unresolvable_payloads(fields: dict[str, Any], attempted: str | None) -> None:
    with pytest.raises(IdentityError) as info:
        resolve_identity("gadget", fields)
    error = info.value
    assert error.code == "ERR_CANONICAL_NAME_UNRESOLVED"
    assert error.details == {"seen_fields": list(fields), "attempted_value": attempted}
    assert "gadget" in error.message
    assert str(error) == error.message


def test_identity_error_lists_fields_in_javascript_order() -> None:
    with pytest.raises(IdentityError) as info:
        resolve_identity("gadget", {"b": "open", "10": "no", "2": "yes"})
    assert info.value.details["seen_fields"] == ["2", "10", "b"]


def test_schema_types_fall_back_to_heuristics() -> None:
    # A conversation_message without turn_key is named by its content ...
    identity = resolve_identity("conversation_message", {"role": "user", "content": "hi there"})
    assert identity.identity_basis == "heuristic_fallback"
    assert not identity.from_schema_rule
    # ... then by the next usable string ("yes" is a rejected token) ...
    identity = resolve_identity("conversation_message", {"role": "user", "content": "yes"})
    assert identity.identity_rule == "first_string_field:role"
    # ... and one with only rejected tokens cannot be named at all.
    with pytest.raises(IdentityError):
        resolve_identity("conversation_message", {"content": "yes", "role": " "})


def test_identity_is_frozen() -> None:
    identity = resolve_identity("note", {"title": "x"})
    assert isinstance(identity, Identity)
    with pytest.raises(AttributeError):
        identity.entity_id = "ent_x"  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Type equivalence and schemas
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("company", "company"),
        ("Company", "company"),
        (" COMPANY ", "company"),
        ("companies", "company"),
        ("Persons", "person"),
        ("Person", "person"),  # case match beats contact's "person" alias
        ("tasks", "task"),
        ("notes", "note"),
        ("conversations", "conversation"),
        ("conversation_messages", "conversation_message"),
        # Declared aliases do not rewrite on a 0.22.0 server (tests/data/type-vectors.json
        # and a probe of each: the registry rows carry no aliases).
        ("turn_compliance", "turn_compliance"),
        ("Turn_Activity", "Turn_Activity"),
        ("organization", "organization"),
        ("agent_message", "agent_message"),
        ("todo", "todo"),
        ("projects", "project"),
        ("Skills", "skill"),
        ("recipe", "recipe"),
        ("Recipe", "Recipe"),
        ("widgets", "widgets"),
        ("status", "status"),
        ("", ""),
    ],
)
def test_resolve_entity_type(given: str, expected: str) -> None:
    assert resolve_entity_type(given) == expected


def test_resolved_type_is_used_for_identity() -> None:
    # Both ids as a real 0.22.0 server assigned them: an alias is a type of its own (its
    # first string field names it), a plural is rewritten to the declared type.
    identity = resolve_identity("Turn_Compliance", {"session_id": "chat-42", "turn_id": "7"})
    assert identity.entity_type == "Turn_Compliance"
    assert identity.entity_id == "ent_7b767a83221ccb9b0e316131"
    plural = resolve_identity("Persons", {"name": "Pat Probe"})
    assert (plural.entity_type, plural.canonical_name) == ("person", "person:Pat Probe")
    assert plural.entity_id == "ent_41753d22068713f5ce9db552"


def test_schema_for() -> None:
    assert schema_for("recipe") is None
    schema = schema_for("Companies")
    assert schema is not None
    assert schema.entity_type == "company"
    assert schema.is_legacy_composite
    turn = schema_for("Conversation Turn")  # code-default lookup tries snake_case
    assert turn is not None
    assert turn.entity_type == "conversation_turn"


@pytest.mark.parametrize(
    ("entity_type", "policy"),
    [
        ("conversation", "reject"),
        ("conversation_message", "reject"),
        ("conversation_turn", "reject"),
        ("person", "merge"),
        ("company", "merge"),
        ("contact", "merge"),
        ("task", "merge"),
        ("note", "merge"),
    ],
)
def test_collision_policies(entity_type: str, policy: str) -> None:
    schema = schema_for(entity_type)
    assert schema is not None
    assert schema.name_collision_policy == policy


@pytest.mark.parametrize(
    ("entity_type", "field", "expected"),
    [
        ("conversation", "title", MergePolicy("highest_priority", "source_priority")),
        ("conversation", "summary", MergePolicy("highest_priority", "source_priority")),
        ("conversation", "participants", MergePolicy("merge_array")),
        ("conversation", "topics", MergePolicy("merge_array")),
        ("conversation", "decisions", MergePolicy("merge_array")),
        ("conversation", "open_tasks", MergePolicy("merge_array")),
        ("conversation", "conversation_id", MergePolicy("last_write")),
        ("conversation_message", "content", MergePolicy("last_write")),
        ("conversation_turn", "hook_events", MergePolicy("last_write")),
        ("person", "name", MergePolicy("highest_priority")),
        ("person", "email", MergePolicy("highest_priority")),
        ("person", "phone", MergePolicy("highest_priority")),
        ("person", "external_id", MergePolicy("highest_priority")),
        ("person", "organization", MergePolicy("last_write")),
        ("company", "name", MergePolicy("highest_priority")),
        ("company", "legal_name", MergePolicy("highest_priority")),
        ("company", "website", MergePolicy("highest_priority")),
        ("company", "email", MergePolicy("highest_priority")),
        ("company", "phone", MergePolicy("last_write")),
        ("task", "notes", MergePolicy("highest_priority", "source_priority")),
        ("task", "description", MergePolicy("highest_priority", "source_priority")),
        ("task", "status", MergePolicy("last_write")),
        ("note", "content", MergePolicy("highest_priority")),
    ],
)
def test_merge_policies(entity_type: str, field: str, expected: MergePolicy) -> None:
    schema = schema_for(entity_type)
    assert schema is not None
    assert schema.policy(field) == expected


def test_schema_is_immutable() -> None:
    schema = schema_for("conversation")
    assert schema is not None
    with pytest.raises(TypeError):
        schema.merge_policies["title"] = MergePolicy("last_write")  # type: ignore[index]


# ---------------------------------------------------------------------------
# js_json and hash_uuid
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1, "b": [True, None, "x"]}, '{"a":1,"b":[true,null,"x"]}'),
        (7.0, "7"),
        ([7.0, -0.0, 0.1, 1.5, 100.0, 1e16], "[7,0,0.1,1.5,100,10000000000000000]"),
        ([1e21, 1.5e-7, 0.000001, 123456789.125], "[1e+21,1.5e-7,0.000001,123456789.125]"),
        (2**53 + 1, "9007199254740992"),
        ({"n": 2**53 + 1, "m": 2**53 - 1}, '{"n":9007199254740992,"m":9007199254740991}'),
        ({"n": -(2**53) - 1}, '{"n":-9007199254740992}'),
        ({"ü": "Ærø 株式会社 😀"}, '{"ü":"Ærø 株式会社 😀"}'),
        ("\u2028/\x7f", '"\u2028/\x7f"'),
        ('q"\\\n\t\x01', '"q\\"\\\\\\n\\t\\u0001"'),
        ("\ud800x", '"\\ud800x"'),
        ({"b": 1, "a": 2}, '{"b":1,"a":2}'),
        ({"b": 1, "10": 2, "2": 3, "01": 4}, '{"2":3,"10":2,"b":1,"01":4}'),
        ((1, 2), "[1,2]"),
        ({}, "{}"),
        ([], "[]"),
    ],
)
def test_js_json(value: Any, expected: str) -> None:
    assert js_json(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        [-math.inf],
        {"a": {1, 2}},
        b"bytes",
        object(),
        {1: "non-str key"},
        10**400,
    ],
)
def test_js_json_refuses(value: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        js_json(value)


def test_js_json_refuses_cycles() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="circular"):
        js_json(cyclic)
    shared = [1]
    assert js_json([shared, shared]) == "[[1],[1]]"  # repeats are not cycles


def test_hash_uuid_format() -> None:
    value = hash_uuid("anything")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", value)
    assert value.replace("-", "") == hashlib.sha256(b"anything").hexdigest()[:32]


def test_hash_uuid_reproduces_server_ids() -> None:
    """Source and observation ids of a recorded store (samples/a_store_turn1_user)."""
    entities = [
        {
            "entity_type": "conversation",
            "conversation_id": "conv-1",
            "title": "Conversation conv-1",
            "platform": "demo",
        },
        {
            "entity_type": "conversation_message",
            "role": "user",
            "sender_kind": "user",
            "content": "Tell me about Acme Corp",
            "turn_key": "conv-1:t1",
        },
    ]
    content_hash = hashlib.sha256(js_json(entities).encode()).hexdigest()
    source_id = hash_uuid(f"source:00000000-0000-0000-0000-000000000000:{content_hash}")
    assert source_id == "0e1cca0d-526f-5ddd-e8ff-f46cde2e7cb5"

    expected_observations = [
        "d0d34c8e-dc6f-a965-0d46-73dd42c6728c",
        "6b8d5f2c-8b94-2624-345e-4349c28249b0",
    ]
    for entity, observation_id in zip(entities, expected_observations, strict=True):
        fields = {k: v for k, v in entity.items() if k != "entity_type"}
        identity = resolve_identity(entity["entity_type"], fields)
        basis = {
            "source_id": source_id,
            "interpretation_id": "none",
            "entity_id": identity.entity_id,
            "fields": fields,
        }
        assert hash_uuid(js_json(basis)) == observation_id


def test_identity_error_pickles() -> None:
    import pickle

    error = IdentityError("gadget", ["name"], "unknown")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.message, clone.details, clone.code) == (error.message, error.details, error.code)


@pytest.mark.parametrize(
    ("entity_type", "fields"),
    [
        ("conversation", {"conversation_id": "c1", "title": "x"}),
        ("company", {"name": "Acme Corp", "note": "a"}),
        ("company", {"name": "", "flavor": "x"}),
        ("company", {"name": "", "flavor": "y"}),
        ("conversation_message", {"role": "user", "content": "no turn key"}),
        ("conversation_turn", {"session_id": "s", "turn_id": "t", "status": "open"}),
        ("conversation_turn", {"session_id": "s", "turn_id": "t", "status": "completed"}),
        ("recipe", {"flavor": "Vanilla Bean"}),
    ],
)
def test_the_memoised_resolution_equals_the_plain_one(
    entity_type: str, fields: dict[str, Any]
) -> None:
    from neotoma_agent._neotoma.identity import resolve_identity_cached

    assert resolve_identity_cached(entity_type, fields) == resolve_identity(entity_type, fields)
