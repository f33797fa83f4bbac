"""Replay every recorded call to a real Neotoma server against a fresh EmbeddedStore.

``shared/reference/samples`` holds calls made in order to a real server (0.22.0) and its
answers. Replaying the REST bodies through ``EmbeddedStore.request`` in the same order must
give the same answers, ids included, apart from what cannot or should not match:

* times, warnings, hints and human-readable messages;
* undeclared fields (``platform``), which the embedded store keeps in snapshots;
* the details of schema-validation errors (Zod's issue shapes): only status and code count;
* the store's deliberate refusals (``REFUSED`` below), after which the test sends what the
  server did accept so that later calls see the same state;
* HTTP-level calls (auth, malformed JSON, routes), which belong to the transports' tests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent.exceptions import APIError
from neotoma_agent.transport.embedded import EmbeddedStore

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (SAMPLES / "INDEX.json").is_file(), reason="shared/reference/samples not laid out"
    ),
]

# Not store semantics: authentication, body parsing, routing, the server's unknown-field guard.
HTTP_LEVEL = frozenset(
    (
        "g2_invalid_bearer",
        "g2b_invalid_bearer_store",
        "g2c_non_bearer_auth_scheme",
        "g2d_missing_bearer_with_xff",
        "g3_malformed_json_store",
        "g3b_malformed_json_retrieve",
        "g4f_store_unknown_top_level_field",
        "g5_unknown_endpoint_post",
        "g5b_unknown_endpoint_get",
        "g6_health",
    )
)
# Deliberate differences: the server accepts (or fails with a 500) what we refuse with a 400.
REFUSED = {
    "g4_entity_without_entity_type": "VALIDATION_INVALID_FORMAT",  # server: 500
    "g4d_store_relationship_index_out_of_range": "VALIDATION_INVALID_FORMAT",  # server skips
    "h9_store_relationship_type_not_in_enum": "VALIDATION_INVALID_FORMAT",  # server skips
    "h12_store_commit_false_dry_run": "VALIDATION_INVALID_FORMAT",  # no dry run here
}
IGNORED_KEYS = frozenset(
    (
        "timestamp",
        "store_warnings",
        "warnings",
        "unknown_fields",
        "unknown_fields_count",
        "required_fields_missing",
        "hint",
        "message",
    )
)
UNDECLARED_FIELDS = frozenset(("platform",))
SNAPSHOT_MAPS = frozenset(("snapshot", "entity_snapshot_after", "provenance"))


def _comparable(value: Any, parent: str = "") -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in IGNORED_KEYS or key.endswith("_at"):
                continue
            if parent in SNAPSHOT_MAPS and key in UNDECLARED_FIELDS:
                continue
            out[key] = _comparable(item, key)
        return out
    if isinstance(value, list):
        return [_comparable(item, parent) for item in value]
    return value


def _calls() -> list[dict[str, Any]]:
    if not (SAMPLES / "INDEX.json").is_file():
        return []
    calls: list[dict[str, Any]] = json.loads((SAMPLES / "INDEX.json").read_text("utf-8"))["calls"]
    return calls


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request = json.loads((SAMPLES / f"{name}.request.json").read_text("utf-8"))
    response = json.loads((SAMPLES / f"{name}.response.json").read_text("utf-8"))
    return request, response


async def _answer(store: EmbeddedStore, action: str, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        return 200, await store.request(action, body)
    except APIError as exc:
        return exc.status, dict(exc.body)


def _error_code(body: dict[str, Any]) -> str | None:
    nested = body.get("error")
    return body.get("error_code") or (nested.get("code") if isinstance(nested, dict) else None)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    async with EmbeddedStore.open(tmp_path / "store.db") as s:
        yield s


async def test_replaying_the_recorded_server_calls_gives_the_servers_answers(
    store: EmbeddedStore,
) -> None:
    replayed = 0
    for call in _calls():
        name = call["name"]
        if name in HTTP_LEVEL:
            continue
        if name[0] in "ijkmn":  # replayed by the fidelity branch
            continue
        request, response = _load(name)
        action = call["path"].lstrip("/")
        status, ours = await _answer(store, action, request["body"])
        expected = response["body"]
        if request["body"].get("include_observations"):
            # Not implemented by the embedded store (the dev server refuses it with a 501).
            for item in expected["entities"]:
                del item["observations"]

        if name in REFUSED:
            assert (status, _error_code(ours)) == (400, REFUSED[name]), name
            if response["status"] == 200 and expected.get("commit", True):
                # Send what the server stored (its edges were dropped) to keep states equal.
                body = {k: v for k, v in request["body"].items() if k != "relationships"}
                status, ours = await _answer(store, action, body)
            else:
                continue
        assert status == response["status"], (name, ours)

        if name == "e7b_entities_query_search":
            # Known gap: the server's lexical search also matches snapshot text (a message
            # that mentions "Acme"); ours searches names only, so it finds a subset.
            server_ids = {e["entity_id"] for e in expected["entities"]}
            assert {e["entity_id"] for e in ours["entities"]} < server_ids
            replayed += 1
            continue
        if status != 200:
            assert _error_code(ours) == _error_code(expected), name
            if "error" in expected:  # the nested /store family: issues are ours to match
                assert _comparable(ours) == _comparable(expected), name
        else:
            assert _comparable(ours) == _comparable(expected), name
        replayed += 1
    assert replayed >= 45
