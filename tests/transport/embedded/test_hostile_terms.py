"""Any text as a search term sent straight to the embedded store (no server in between).

What matters: ``query_entities(search=...)`` and ``retrieve_entity_by_identifier`` answer any
``str`` with a result or a typed :class:`ValidationError` (400), never sqlite's own error; a NUL
(no stored name can hold one to match) is the same 400 ``VALIDATION_INVALID_FORMAT`` the
server's routes answer; the store stays usable after a refusal.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent import EmbeddedStore, NeotomaMemory, ValidationError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with a named entity, a conversation and its messages."""
    path = tmp_path_factory.mktemp("terms") / "memory.db"

    async def write() -> None:
        async with EmbeddedStore.open(path) as s:
            await s.store(
                entities=[{"entity_type": "company", "canonical_name": "Acme Corp"}],
                idempotency_key="acme",
            )
            memory = NeotomaMemory(s, conversation_id="c1")
            await memory.record_turn("About Acme Corp?", "A company.", turn_id="t1")

    anyio.run(write)
    return path


# Any code point, NUL and lone surrogates included; NUL-heavy on purpose.
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60) | st.builds(
    lambda a, b: a + "\x00" + b, st.text(max_size=20), st.text(max_size=20)
)


async def _each_read(s: EmbeddedStore, term: str) -> list[ValidationError | None]:
    outcomes: list[ValidationError | None] = []
    for read in (
        lambda: s.query_entities(search=term),
        lambda: s.query_entities(search=term, entity_type="company"),
        lambda: s.retrieve_entity_by_identifier(term),
        lambda: s.retrieve_entity_by_identifier(term, entity_type="company"),
    ):
        try:
            await read()
        except ValidationError as e:
            outcomes.append(e)
        else:
            outcomes.append(None)
    return outcomes


@settings(max_examples=120, deadline=None)
@given(term=_ANY_TEXT)
def test_any_text_is_an_answer_or_a_typed_400(corpus: Path, term: str) -> None:
    async def run() -> None:
        async with EmbeddedStore.open(corpus, read_only=True) as s:
            outcomes = await _each_read(s, term)
            assert all(o is None or o.status == 400 for o in outcomes)
            if "\x00" in term:
                assert all(
                    o is not None and o.code == "VALIDATION_INVALID_FORMAT" for o in outcomes
                )
            # still usable after whatever that was
            found = await s.retrieve_entity_by_identifier("Acme Corp")
            assert found.entities

    anyio.run(run)


@pytest.mark.anyio
@pytest.mark.parametrize("term", ["\x00", "Acme\x00Corp", "Acme Corp\x00", "a\x00\x00b"])
async def test_a_nul_is_refused_as_the_server_refuses_it(tmp_path: Path, term: str) -> None:
    async with EmbeddedStore.open(tmp_path / "memory.db") as s:
        await s.store(
            entities=[{"entity_type": "company", "canonical_name": "Acme Corp"}],
            idempotency_key="acme",
        )
        for read in (
            lambda: s.query_entities(search=term),
            lambda: s.retrieve_entity_by_identifier(term),
        ):
            with pytest.raises(ValidationError) as caught:
                await read()
            assert caught.value.code == "VALIDATION_INVALID_FORMAT"
            assert "NUL" in str(caught.value)
            assert term not in str(caught.value) or term == "\x00"
