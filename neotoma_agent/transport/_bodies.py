"""REST request bodies that are plain data: built without the typed results.

The transports (``_rest``) and the synchronous driver on a store file (``embedded._turns``)
send the same ``POST /store`` body, built here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._spliced import EncodedEntity

__all__ = ["present", "store_body"]


def present(**fields: Any) -> dict[str, Any]:
    """A REST body of the fields that were given: ``None`` means absent, as a server reads it."""
    return {key: value for key, value in fields.items() if value is not None}


def store_body(
    entities: Sequence[Mapping[str, Any]],
    *,
    idempotency_key: str,
    relationships: Sequence[Mapping[str, Any]] = (),
    source_priority: int | None = None,
    observation_source: str | None = None,
    strict: bool = False,
) -> dict[str, Any]:
    """The JSON body of ``POST /store`` (the outbox keeps exactly this body)."""
    return present(
        # A copy of each element; one that kept its JSON text keeps it (see _spliced).
        entities=[e.copy() if type(e) is EncodedEntity else dict(e) for e in entities],
        relationships=[dict(r) for r in relationships] or None,
        idempotency_key=idempotency_key,
        source_priority=source_priority,
        observation_source=observation_source,
        strict=strict or None,
    )
