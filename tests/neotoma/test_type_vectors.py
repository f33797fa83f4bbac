"""Every entity type a real Neotoma 0.22.0 server declares: its ids and snapshots, as recorded.

``tests/data/type-vectors.json`` holds what a fresh 0.22.0 server answered for payloads of
each of its 88 declared types (``scripts/record_type_vectors.py``): the library computes
the same identities, and the embedded store keeps the same snapshot fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from paths_support import TESTS

from neotoma_agent._neotoma.identity import IdentityError, resolve_identity, schema_for
from neotoma_agent._neotoma.schema_table import SCHEMA_ROWS
from neotoma_agent.exceptions import APIError
from neotoma_agent.transport.embedded import EmbeddedStore

_DOC = json.loads((TESTS / "data" / "type-vectors.json").read_text("utf-8"))
VECTORS: list[dict[str, Any]] = _DOC["vectors"]


def _id(vector: dict[str, Any]) -> str:
    return f"{vector['entity_type']}:{vector['case']}"


def test_the_vectors_cover_every_declared_type() -> None:
    declared = {row[0] for row in SCHEMA_ROWS}
    assert len(declared) == 88
    assert {v["entity_type"] for v in VECTORS if v["case"] == "rule"} == declared
    assert all(schema_for(t) is not None for t in declared)


def test_identity_is_the_servers() -> None:
    # One test over all 440 vectors (not one each): a mismatch lists every case that differs.
    mismatches: list[str] = []
    for v in VECTORS:
        try:
            identity = resolve_identity(v["entity_type"], v["fields"])
        except IdentityError:
            if "refused" not in v:
                mismatches.append(f"{_id(v)}: refused, the server stored it")
            continue
        if "refused" in v:
            mismatches.append(f"{_id(v)}: resolved, the server refused {v['refused']}")
            continue
        got = (identity.entity_type, identity.canonical_name, identity.entity_id)
        want = (v["resolved_entity_type"], v["canonical_name"], v["entity_id"])
        if got != want or identity.identity_basis != v["identity_basis"]:
            mismatches.append(f"{_id(v)}: {got} {identity.identity_basis} != server {want}")
    assert mismatches == []


# The store's own code runs on its thread: one backend is enough (asyncio).
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_the_embedded_store_keeps_what_the_server_keeps(tmp_path: Path) -> None:
    accepted = [v for v in VECTORS if "refused" not in v]
    mismatches: list[str] = []
    async with EmbeddedStore(tmp_path / "types.db") as store:
        for v in VECTORS:
            if "refused" in v:
                entity = {"entity_type": v["entity_type"], **v["fields"]}
                with pytest.raises(APIError) as refused:
                    await store.store([entity], idempotency_key=f"vector:{_id(v)}")
                assert refused.value.code == v["refused"], _id(v)
        # Distinct identities: one store for all of them (the server had one store each).
        stored = await store.store(
            [{"entity_type": v["entity_type"], **v["fields"]} for v in accepted],
            idempotency_key="vectors",
        )
        for v, item in zip(accepted, stored.raw["entities"], strict=True):
            snapshot = await store.get_entity_snapshot(item["entity_id"])
            got = (
                item["entity_id"],
                item["entity_type"],
                sorted(snapshot.snapshot),
                snapshot.raw.get("schema_version"),
            )
            want = (
                v["entity_id"],
                v["resolved_entity_type"],
                v["snapshot_fields"],
                v["schema_version"],
            )
            if got != want:
                mismatches.append(f"{_id(v)}: {got} != server {want}")
    assert mismatches == []
