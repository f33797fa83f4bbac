"""neotoma-agent: correct, fast, crash-safe Neotoma memory for any LLM agent loop."""

from __future__ import annotations

from ._current import current_turn
from ._memory import NeotomaMemory, OpenTurn
from ._payloads import Produced
from ._retrieval import (
    Extractor,
    RetrievalQuery,
    RetrievalStats,
    Retrieved,
    RetrievedEntity,
    Retriever,
    default_extractor,
)
from ._tool_reads import StoredToolCall
from ._tools import ActiveToolCall, ToolCall, ToolRedactor
from ._turn import Turn, TurnResult, TurnState
from ._version import __version__
from .exceptions import (
    APIError,
    AuthenticationError,
    ConnectionLost,
    ConnectTimeout,
    IdempotencyMismatchError,
    NeotomaError,
    NotFoundError,
    OutboxError,
    OutboxFullError,
    RateLimitedError,
    ReadTimeout,
    ServerError,
    ToolCallConflictError,
    TransportError,
    TurnCloseError,
    TurnStateError,
    ValidationError,
)
from .qa import (
    AttachmentObservation,
    AuditReport,
    Diagnosis,
    Finding,
    FindingKind,
    MessageObservation,
    RepairOutcome,
    RepairResult,
    ReportEntity,
    ReportRepair,
    TurnObservation,
    TurnReportInput,
    apply_repairs,
    audit,
    diagnose_turn,
    render_turn_report,
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
from .transport._outbox import LaneStatus, OutboxFlush, OutboxStatus, StoreOutcome, outbox_status
from .transport.embedded import EmbeddedStore
from .transport.http import HttpTransport, RetryPolicy, flush_outbox
from .wrap import AgentReply, AgentStream, MemoryAgent, StoppedEarly, with_memory

__all__ = [  # tests/test_public_api.py pins it
    "APIError",
    "ActiveToolCall",
    "AgentReply",
    "AgentStream",
    "AttachmentObservation",
    "AuditReport",
    "AuthenticationError",
    "ConnectTimeout",
    "ConnectionLost",
    "CorrectionResult",
    "CreateRelationshipsResult",
    "Diagnosis",
    "EmbeddedStore",
    "Entity",
    "EntityQueryResult",
    "EntitySnapshot",
    "Extractor",
    "Finding",
    "FindingKind",
    "HttpTransport",
    "IdempotencyMismatchError",
    "LaneStatus",
    "LookupResult",
    "MemoryAgent",
    "MessageObservation",
    "NeotomaError",
    "NeotomaMemory",
    "NotFoundError",
    "Observation",
    "ObservationList",
    "OpenTurn",
    "OutboxError",
    "OutboxFlush",
    "OutboxFullError",
    "OutboxStatus",
    "Produced",
    "RateLimitedError",
    "ReadTimeout",
    "RelatedEntities",
    "RelationshipSnapshot",
    "RepairOutcome",
    "RepairResult",
    "ReportEntity",
    "ReportRepair",
    "RetrievalQuery",
    "RetrievalStats",
    "Retrieved",
    "RetrievedEntity",
    "Retriever",
    "RetryPolicy",
    "ServerError",
    "StoppedEarly",
    "StoreOutcome",
    "StoreResult",
    "StoredEntity",
    "StoredToolCall",
    "ToolCall",
    "ToolCallConflictError",
    "ToolRedactor",
    "Transport",
    "TransportError",
    "Turn",
    "TurnCloseError",
    "TurnObservation",
    "TurnReportInput",
    "TurnResult",
    "TurnState",
    "TurnStateError",
    "ValidationError",
    "__version__",
    "apply_repairs",
    "audit",
    "current_turn",
    "default_extractor",
    "diagnose_turn",
    "flush_outbox",
    "outbox_status",
    "render_turn_report",
    "with_memory",
]

# Public names report themselves as neotoma_agent.X, not the private module they live in.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("neotoma_agent."):
        _obj.__module__ = "neotoma_agent"
del _name, _obj
