"""query_entities pages by cursor: every entity exactly once, in id order, at a flat cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from neotoma_agent import EmbeddedStore, ValidationError

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]


async def test_cursor_pages_cover_every_entity_once_in_id_order(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        names = [f"Company {i:03d}" for i in range(23)]
        await store.store(
            [{"entity_type": "company", "name": n} for n in names], idempotency_key="seed"
        )
        await store.store([{"entity_type": "person", "name": "Ana"}], idempotency_key="p")

        seen: list[str] = []
        page = await store.query_entities(entity_type="company", limit=5)
        assert page.total == 23
        seen += [e.entity_id for e in page.entities]
        while page.next_cursor is not None:
            page = await store.query_entities(
                entity_type="company", limit=5, cursor=page.next_cursor
            )
            assert page.total == 23
            seen += [e.entity_id for e in page.entities]
        assert len(seen) == 23
        assert seen == sorted(seen)
        assert {e.entity_type for e in (await store.query_entities()).entities} == {
            "company",
            "person",
        }


async def test_a_made_up_cursor_is_refused(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        with pytest.raises(ValidationError, match="cursor"):
            await store.query_entities(cursor="page-2")
