"""What HttpTransport sends for a body: json.dumps's bytes and errors, from an encoder built
once (no per-request encoder, no cycle check but on a cyclic body)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from neotoma_agent.transport.http import encode_body


def _reference(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _cyclic() -> dict[str, Any]:
    body: dict[str, Any] = {"entities": []}
    body["entities"].append({"entity_type": "note", "self": body})
    return body


BODIES = [
    {
        "entities": [
            {"entity_type": "tool_invocation", "duration_ms": 3.5, "arguments": {"i": 1}},
            {"entity_type": "conversation_message", "content": 'é ✓ \u2028 "q" \\ \n'},
        ],
        "relationships": [{"relationship_type": "REFERS_TO", "source_index": 1}],
        "idempotency_key": "k",
    },
    {"a": float("nan"), "b": [float("inf"), -0.0, 1e300, True, None], "c": {"1": []}},
    {1: "int key", 2.5: "float key", None: "none key", False: "bool key"},
    {"deep": [[[[{"x": [1, 2, {"y": "z"}]}]]]]},
]


@pytest.mark.parametrize("body", BODIES)
def test_bytes_are_json_dumps_bytes(body: Any) -> None:
    assert encode_body(body) == _reference(body)


@pytest.mark.parametrize(
    "body",
    [_cyclic(), {"x": object()}, {(1, 2): "tuple key"}, {"x": {1, 2}}],
    ids=["cycle", "object", "tuple-key", "set"],
)
def test_errors_are_json_dumps_errors(body: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as reference:
        _reference(body)
    with pytest.raises(type(reference.value)) as ours:
        encode_body(body)
    assert str(ours.value) == str(reference.value)
