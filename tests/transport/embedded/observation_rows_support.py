"""What a store file holds in its observation rows, read with plain ``sqlite3``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from neotoma_agent.transport.embedded._rows import encode_entity


def stored_fields(path: Path, entity_id: str) -> list[str | None]:
    """The ``fields`` column of an entity's observation rows, newest first."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT fields FROM observations WHERE entity_id = ? ORDER BY seq DESC",
            (encode_entity(entity_id),),
        ).fetchall()
    return [r[0] for r in rows]
