"""Record, from a real Neotoma 0.22.0 server, the identity and snapshot of every declared type.

    python scripts/record_type_vectors.py --url http://127.0.0.1:PORT [--token dev-local]
                                          [--out tests/data/type-vectors.json]

Use a fresh instance (``/work/shared/tools/neotoma-peer/start-peer.sh PORT``). For each type
of ``neotoma_agent._neotoma.schema_table`` it stores, one entity per store:

- ``rule``: a value for every field of the type's first identity rule (or ``name`` when it
  has none), plus a field no schema declares (``zz_undeclared``);
- ``name`` and ``title``: only that field (the heuristic path, or a rule on it);
- the plural and the capitalised spelling of the type, which the server may rewrite.

and writes what the server answered: the resolved type, canonical name, entity id and
identity basis (or the refusal's code), and the snapshot's field names and
``schema_version``. ``tests/neotoma/test_type_vectors.py`` checks the library against the file:
the identity it computes, and what the embedded store keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from neotoma_agent._neotoma.schema_table import SCHEMA_ROWS
from neotoma_agent.exceptions import APIError
from neotoma_agent.transport.http import HttpTransport

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "type-vectors.json"


def _value(entity_type: str, field: str) -> Any:
    # Distinct per type so no two payloads share an identity; numbers where the name says so.
    if field.endswith(("_number", "_index", "_count")):
        return 7
    if field.endswith(("_date", "_at")) or field == "date":
        return "2026-12-01"
    if field in ("email", "reporter_email"):
        return f"{entity_type}@example.com"
    return f"{entity_type} {field} value"


def payloads(row: tuple[Any, ...]) -> list[tuple[str, str, dict[str, Any]]]:
    entity_type, rules = row[0], row[2]
    first = rules[0] if rules else "name"
    fields = (first,) if isinstance(first, str) else first
    rule_fields = {f: _value(entity_type, f) for f in fields}
    rule_fields["zz_undeclared"] = "kept only on the observation"
    plural = entity_type + ("es" if entity_type.endswith(("s", "x", "ch", "sh")) else "s")
    return [
        ("rule", entity_type, rule_fields),
        ("name", entity_type, {"name": f"{entity_type} Named Thing"}),
        ("title", entity_type, {"title": f"{entity_type} Titled Thing"}),
        ("plural", plural, {"name": f"{entity_type} Plural Thing"}),
        ("capitalised", entity_type.capitalize(), {"name": f"{entity_type} Capital Thing"}),
    ]


async def record(url: str, token: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with HttpTransport(url, token=token) as transport:
        for row in SCHEMA_ROWS:
            for case, entity_type, fields in payloads(row):
                vector: dict[str, Any] = {"case": case, "entity_type": entity_type}
                vector["fields"] = fields
                key = f"type-vector:{case}:{entity_type}:{json.dumps(fields, sort_keys=True)}"
                try:
                    stored = await transport.store(
                        [{"entity_type": entity_type, **fields}], idempotency_key=key
                    )
                except APIError as exc:
                    vector["refused"] = exc.code
                    out.append(vector)
                    continue
                item = stored.raw["entities"][0]
                snapshot = await transport.get_entity_snapshot(item["entity_id"])
                vector.update(
                    resolved_entity_type=item["entity_type"],
                    canonical_name=item.get("canonical_name"),
                    entity_id=item["entity_id"],
                    identity_basis=item.get("identity_basis"),
                    snapshot_fields=sorted(snapshot.snapshot),
                    schema_version=snapshot.raw.get("schema_version"),
                )
                out.append(vector)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", default="dev-local")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    vectors = asyncio.run(record(args.url, args.token))
    doc = {
        "about": (
            "What a fresh Neotoma 0.22.0 server (release afd3b380f) answered for one store per "
            "payload, for every type its schema registry declares: the resolved type, "
            "canonical name, entity id and identity basis (or the refusal code), and the "
            "snapshot's field names and schema_version. Recorded by "
            "scripts/record_type_vectors.py."
        ),
        "vectors": vectors,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {len(vectors)} vectors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
