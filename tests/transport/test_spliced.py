"""A closing store's tool calls keep the JSON text recording made of them, and the request
splices it in: the bytes sent are json.dumps's bytes for any arguments and results (any
JSON, any Unicode, huge, capped, summarised, redacted), and the embedded store writes the
same as from a plain dict."""

from __future__ import annotations

import copy
import enum
import json
import pickle
from typing import Any, Literal

import json_support
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent import ToolCall
from neotoma_agent._neotoma.js import _js_json_parts, _js_number, _positional, js_json
from neotoma_agent._records.tool_payload import ToolPayloads, tool_entity
from neotoma_agent.transport._bodies import store_body
from neotoma_agent.transport._spliced import EncodedEntity, encode_spliced, encoded
from neotoma_agent.transport.http import _encode_fast, encode_body

json_values = json_support.json_values(
    json_support.SCALARS
    | st.integers()  # beyond what JavaScript keeps: json.dumps writes them all the same
)
# Longer than the default cap (4,096 characters), built by repetition (drawing them whole is
# slow): a cut value, its marker and its length are then in the element.
huge = st.text(min_size=1, max_size=20).map(lambda s: s * 500) | st.lists(
    st.text(max_size=5), min_size=1, max_size=5
).map(lambda items: items * 300)
payloads = st.builds(
    ToolPayloads,
    mode=st.sampled_from(["full", "summary", "none"]),
    max_chars=st.integers(1, 5000),
)


def _reference(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _mask(name: str, field: Literal["args", "result"], value: Any) -> Any:
    return {"masked": field, "tool": name, "was": type(value).__name__}


def _entity(args: Any, result: Any, how: ToolPayloads, **kw: Any) -> dict[str, Any]:
    call = ToolCall.create(
        "search ✈ flights", args=args, result=result, invoked_at="2026-12-01T10:00:00.000Z", **kw
    )
    return tool_entity(call, "c:t\u2028é", "bench", how)


names = st.text(min_size=1).filter(lambda s: s.strip() == s and bool(s))
durations = st.none() | st.floats(0, 1e12) | st.integers(0, 2**64)


@settings(max_examples=200)
@given(
    args=json_values | huge,
    result=json_values | huge,
    how=payloads,
    name=names,
    turn_key=st.text(),
    harness=st.none() | st.text(),
    call_id=st.none() | names,
    ended=st.sampled_from([("ok", None), ("error", "ValueError"), ("cancelled", None)]),
    duration=durations,
)
def test_the_kept_text_is_json_dumps_of_the_element(
    args: Any,
    result: Any,
    how: ToolPayloads,
    name: str,
    turn_key: str,
    harness: str | None,
    call_id: str | None,
    ended: tuple[str, str | None],
    duration: float | None,
) -> None:
    status, error_class = ended
    call = ToolCall.create(
        name,
        args=args,
        result=result,
        status=status,  # type: ignore[arg-type]
        error_class=error_class,
        call_id=call_id,
        duration_ms=duration,
        invoked_at="2026-12-01T10:00:00.000Z",
    )
    entity = tool_entity(call, turn_key, harness, how)
    assert type(entity) is EncodedEntity
    assert entity.json is not None
    assert entity.json.encode() == _reference(entity)
    assert list(entity) == list(json.loads(entity.json))  # the same key order


@settings(max_examples=100)
@given(args=json_values, result=json_values)
def test_a_redacted_element_keeps_the_text_of_what_is_stored(args: Any, result: Any) -> None:
    entity = _entity(args, result, ToolPayloads(redact=_mask), call_id="call-1")
    assert entity.json is not None
    assert entity.json.encode() == _reference(entity)


@settings(max_examples=100)
@given(args=st.lists(json_values | huge, max_size=3), how=payloads)
def test_a_spliced_body_is_json_dumps_of_the_body(args: list[Any], how: ToolPayloads) -> None:
    tools = [_entity(a, {"n": i}, how) for i, a in enumerate(args)]
    plain = [{"entity_type": "conversation_turn", "turn_id": "t", "note": "\ud7ff ✓"}]
    body = store_body(
        [*plain, *tools],
        idempotency_key="k",
        relationships=[{"relationship_type": "REFERS_TO", "source_index": 0, "target_index": 1}],
        source_priority=100,
    )
    assert all(type(e) is EncodedEntity for e in body["entities"][1:])  # kept by the copy
    assert encode_body(body) == _reference(body)
    assert encode_body(body) == encode_body(json.loads(_reference(body)))  # as plain dicts


def test_the_request_reuses_the_text_instead_of_encoding_again() -> None:
    entity = _entity({"to": "LIS"}, [1, 2], ToolPayloads())
    stand_in = encoded(entity, text='{"spliced":true}')  # what only the kept text says
    body = store_body([stand_in], idempotency_key="k")
    assert encode_body(body) == b'{"entities":[{"spliced":true}],"idempotency_key":"k"}'


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.__setitem__("extra", 1),
        lambda e: e.__delitem__("harness"),
        lambda e: e.update(tool_name="other"),
        lambda e: e.pop("result_status"),
        lambda e: e.setdefault("new", [1]),
        lambda e: e.popitem(),
        lambda e: e.__ior__({"x": "y"}),
        lambda e: e.clear(),
    ],
    ids=["set", "del", "update", "pop", "setdefault", "popitem", "ior", "clear"],
)
def test_a_changed_element_is_encoded_as_it_now_is(change: Any) -> None:
    entity = _entity({"to": "LIS"}, None, ToolPayloads())
    assert isinstance(entity, EncodedEntity)
    change(entity)
    assert entity.json is None
    body = store_body([entity], idempotency_key="k")
    assert encode_body(body) == _reference(body)
    assert encode_spliced(body, _encode_fast) is None  # nothing left to splice


def test_copies_keep_the_text_and_pickles_are_plain_dicts() -> None:
    entity = _entity({"to": "LIS"}, "ok", ToolPayloads())
    assert isinstance(entity, EncodedEntity)
    assert entity.copy().json == entity.json
    assert type(entity.copy()) is EncodedEntity
    for other in (pickle.loads(pickle.dumps(entity)), copy.deepcopy(entity), dict(entity)):
        assert type(other) is dict
        assert other == entity


def test_bodies_of_another_shape_are_left_to_the_encoder() -> None:
    entity = _entity({"to": "LIS"}, "ok", ToolPayloads())
    assert encode_spliced({"entities": (entity,)}, _encode_fast) is None  # not a list
    odd = {"entities": [entity], 1: "int key"}
    assert encode_spliced(odd, _encode_fast) is None
    assert encode_body(odd) == _reference(odd)


# --- the embedded store's JSON (JavaScript's JSON.stringify) of the same elements --------


@settings(max_examples=300)
@given(args=json_values, result=json_values, how=payloads, ms=st.floats(0, 1e12))
def test_the_embedded_store_writes_the_same_as_from_a_plain_dict(
    args: Any, result: Any, how: ToolPayloads, ms: float
) -> None:
    entity = _entity(args, result, how, duration_ms=ms)
    out: list[str] = []
    _js_json_parts(dict(entity), out, set())  # the careful path, value by value
    assert js_json(entity) == js_json(dict(entity)) == "".join(out)


@settings(max_examples=2000)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_positional_float_is_written_alike_by_python_and_javascript(value: float) -> None:
    if _positional(value):
        assert repr(value) == _js_number(value)


@pytest.mark.parametrize(
    "value",
    [1e-4, 9.999999999999999e-05, 1e16 - 2, 1e16, 0.5, -0.5, 7.0, -0.0, 0.0, 1.5e-7, 2.5e20],
)
def test_positional_floats_at_the_edges(value: float) -> None:
    assert _positional(value) == (repr(value) == _js_number(value) and "e" not in repr(value))
    out: list[str] = []
    _js_json_parts({"x": [value]}, out, set())
    assert js_json({"x": [value]}) == "".join(out)


def test_numbers_of_a_subclass_are_written_as_json_writes_them() -> None:
    class Millis(enum.IntEnum):
        THREE = 3

    for duration in (Millis.THREE, 2.5, 7, 1e300):
        entity = _entity({"to": "LIS"}, None, ToolPayloads(), duration_ms=duration)
        assert entity.json is not None
        assert entity.json.encode() == _reference(entity)


def test_the_text_is_written_when_first_read_not_when_the_call_is_built() -> None:
    entity = _entity({"to": "LIS"}, [1], ToolPayloads())
    assert isinstance(entity, EncodedEntity)
    assert entity._text is None  # recording the call wrote nothing yet
    text = entity.json
    assert text is not None
    assert entity._text is text  # and only once
    assert EncodedEntity({"entity_type": "x"}).json is None  # not built by encoded()


def test_the_body_of_a_store_copies_the_elements_without_writing_their_text() -> None:
    entity = _entity({"to": "LIS"}, [1], ToolPayloads())
    body = store_body([entity], idempotency_key="k")
    copied = body["entities"][0]
    assert type(copied) is EncodedEntity
    assert copied is not entity
    assert copied._text is None  # the embedded store writes it on its own thread, if at all
    assert encode_body(body) == _reference(body)
