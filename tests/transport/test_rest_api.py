"""``neotoma_agent.transport.rest``: the REST shapes a client and a Neotoma-compatible
server share, used through their public names.

What matters: a REST body runs as is on the transports that speak REST (the answer is the
one the typed method parses) and is declined, with ``None``, by any other transport; the
error bodies are the envelopes a Neotoma server sends and HttpTransport reads back into the
same typed error; a value's type is named as the server's validators name it; a text with a
lone surrogate is not storable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent import EmbeddedStore, NotFoundError, ValidationError
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._wire import error_from_response
from neotoma_agent.transport.rest import (
    MAX_DEPTH,
    SEARCH_ACTION,
    check_text,
    envelope_of,
    flat_envelope,
    html_error_page,
    is_storable,
    json_type,
    present,
    rest_request,
)

ENTITY = {"entity_type": "company", "name": "Acme Corp"}


@pytest.mark.anyio
async def test_a_rest_body_runs_as_is_on_a_store_that_speaks_rest(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        body = {"entities": [ENTITY], "idempotency_key": "k1"}
        answer = await rest_request(store, "store", body)
        assert answer is not None
        [entry] = answer["entities"]
        typed = await store.store([ENTITY], idempotency_key="k1")  # a replay of the same
        assert typed.entities[0].entity_id == entry["entity_id"]
        found = await rest_request(store, "entities/query", present(entity_type="company"))
        assert found is not None
        assert [e["entity_id"] for e in found["entities"]] == [entry["entity_id"]]
        searched = await rest_request(store, SEARCH_ACTION, {"q": "acme", "limit": 5})
        assert searched is not None
        assert [h["entity_id"] for h in searched["hits"]] == [entry["entity_id"]]


@pytest.mark.anyio
async def test_any_other_transport_is_declined_and_not_called(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as store:
        wrapper = RecordingTransport(store)
        assert await rest_request(wrapper, "store", {"entities": [ENTITY]}) is None
        assert wrapper.calls == []


def test_present_leaves_out_what_was_not_given() -> None:
    assert present(entity_type="company", search=None, limit=0) == {
        "entity_type": "company",
        "limit": 0,
    }


def test_an_error_envelope_reads_back_as_the_same_typed_error() -> None:
    body = envelope_of(NotFoundError("no such entity", status=404))
    assert body["error_code"] == "RESOURCE_NOT_FOUND"
    assert body["message"] == "no such entity"
    assert set(body) == {"error_code", "message", "timestamp"}
    back = error_from_response(404, body, {})
    assert isinstance(back, NotFoundError)
    assert (back.status, back.code, back.message) == (404, "RESOURCE_NOT_FOUND", "no such entity")
    flat = flat_envelope("VALIDATION_ERROR", "limit too large", {"max": 100})
    refused = error_from_response(400, flat, {})
    assert isinstance(refused, ValidationError)
    assert refused.body["details"] == {"max": 100}


def test_an_envelope_an_error_came_with_is_sent_as_it_came() -> None:
    nested = {"error": {"code": "ERR_STORE_FAILED", "message": "boom", "retryable": True}}
    assert envelope_of(ValidationError("boom", status=400, body=nested)) == nested


def test_the_html_page_escapes_the_message() -> None:
    page = html_error_page("Cannot POST /<script>")
    assert "<pre>Cannot POST /&lt;script&gt;</pre>" in page
    assert "<script>" not in page


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "boolean"),
        (3, "number"),
        (2.5, "number"),
        ("x", "string"),
        ([1], "array"),
        ({"a": 1}, "object"),
    ],
)
def test_a_values_type_is_named_as_the_servers_validators_name_it(value: object, name: str) -> None:
    assert json_type(value) == name


@given(st.text())
def test_a_text_is_storable_unless_it_holds_a_lone_surrogate(text: str) -> None:
    assert is_storable(text)
    assert not is_storable(text + "\ud800")
    assert not is_storable("\udc00" + text)


def test_max_depth_is_the_depth_a_store_refuses_beyond() -> None:
    assert MAX_DEPTH == 100


def test_check_text_refuses_a_lone_surrogate_without_quoting_the_text() -> None:
    with pytest.raises(ValidationError) as info:
        check_text("'user'", "my secret \ud800 text")
    assert info.value.code == "INVALID_TEXT"
    assert "U+D800 at index 10" in info.value.message
    assert "secret" not in str(info.value)
    with pytest.raises(TypeError, match="'user' must be a str"):
        check_text("'user'", 7)
    assert check_text("'user'", "\ud83d\ude00 ok") == "\U0001f600 ok"  # a pair is joined
