"""The typed answers of the calls a turn never makes (``transport/_query_results``): each
plain field is read from the answer's key of its name as its type says, the same way in
every result.

What matters: an answer with a field missing, sent as ``null`` or of another JSON type
still reads (a string field ``""``, a number 0, an optional field ``None``), never raising
and never a ``"None"`` string; the fields a result reads whole come back as sent.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent.transport._base import (
    ConversationPage,
    ConversationSummaryItem,
    ConversationSummaryPage,
    CorrectionResult,
    EntityDeletion,
    EntityQueryResult,
    Observation,
)

RESULTS = (
    Observation,
    EntityDeletion,
    CorrectionResult,
    ConversationSummaryItem,
    ConversationPage,
    ConversationSummaryPage,
    EntityQueryResult,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


def _fields(cls: type) -> dict[str, str]:
    return {f.name: str(f.type) for f in attrs.fields(cls) if f.name != "raw"}


def test_a_field_sent_as_null_reads_as_a_missing_one() -> None:
    for cls in RESULTS:
        nulls = dict.fromkeys(_fields(cls))
        assert cls.from_json(nulls) == cls.from_json({}), cls.__name__  # type: ignore[attr-defined]


def test_each_field_reads_the_key_of_its_name() -> None:
    observation = Observation.from_json(
        {
            "id": "obs_1",
            "entity_id": "ent_1",
            "entity_type": "company",
            "source_id": "src",
            "observed_at": "2026-12-07T08:00:00.000Z",
            "source_priority": 100,
            "observation_source": "llm_summary",
            "fields": {"name": "Acme Corp"},
        }
    )
    assert observation == Observation(
        "obs_1",
        "ent_1",
        "company",
        "src",
        "2026-12-07T08:00:00.000Z",
        100,
        "llm_summary",
        {"name": "Acme Corp"},
        raw={},
    )
    item = ConversationSummaryItem.from_json({"conversation_id": "c", "turns": 3, "open": 1})
    assert (item.conversation_id, item.entity_id, item.title, item.turns, item.open) == (
        "c",
        "",
        None,
        3,
        1,
    )
    page = ConversationPage.from_json({"has_more": True, "limit": 5, "items": [{}, 7]})
    assert (page.has_more, page.limit, page.offset, len(page.items)) == (True, 5, 0, 1)
    correction = CorrectionResult.from_json({"value": [1], "snapshot": "not a map"})
    assert (correction.value, correction.snapshot, correction.field) == ([1], None, "")


@given(st.sampled_from(RESULTS), st.data())
def test_any_answer_reads_each_field_as_its_type(cls: Any, data: st.DataObject) -> None:
    fields = _fields(cls)
    raw = data.draw(st.dictionaries(st.sampled_from(sorted(fields)), JSON))
    result = cls.from_json(raw)
    assert getattr(result, "raw", raw) is raw
    for name, kind in fields.items():
        value = getattr(result, name)
        if kind == "str":
            assert isinstance(value, str)
            assert value == ("" if raw.get(name) is None else str(raw[name]))
        elif kind == "str | None":
            assert value is None or (isinstance(value, str) and value == raw[name])
        elif kind == "int":
            assert type(value) is int
