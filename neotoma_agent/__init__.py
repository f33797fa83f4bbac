"""neotoma-agent: correct, fast, crash-safe Neotoma memory for any LLM agent loop."""

from __future__ import annotations

from ._version import __version__
from .exceptions import (
    APIError,
    AuthenticationError,
    ConnectionLost,
    ConnectTimeout,
    IdempotencyMismatchError,
    NeotomaError,
    NotFoundError,
    RateLimitedError,
    ReadTimeout,
    ServerError,
    TransportError,
    TurnCloseError,
    TurnStateError,
    ValidationError,
)
from .transport._base import (
    CorrectionResult,
    CreateRelationshipsResult,
    Entity,
    EntityQueryResult,
    EntitySnapshot,
    LookupResult,
    Observation,
    ObservationList,
    RelatedEntities,
    RelationshipSnapshot,
    StoredEntity,
    StoreResult,
    Transport,
)
from .transport.embedded import EmbeddedStore

__all__ = [  # sorted; tests/test_public_api.py pins it
    "APIError",
    "AuthenticationError",
    "ConnectTimeout",
    "ConnectionLost",
    "CorrectionResult",
    "CreateRelationshipsResult",
    "EmbeddedStore",
    "Entity",
    "EntityQueryResult",
    "EntitySnapshot",
    "IdempotencyMismatchError",
    "LookupResult",
    "NeotomaError",
    "NotFoundError",
    "Observation",
    "ObservationList",
    "RateLimitedError",
    "ReadTimeout",
    "RelatedEntities",
    "RelationshipSnapshot",
    "ServerError",
    "StoreResult",
    "StoredEntity",
    "Transport",
    "TransportError",
    "TurnCloseError",
    "TurnStateError",
    "ValidationError",
    "__version__",
]

# Public names report themselves as neotoma_agent.X, not the private module they live in.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("neotoma_agent."):
        _obj.__module__ = "neotoma_agent"
del _name, _obj
