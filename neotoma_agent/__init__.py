"""neotoma-agent: correct, fast, crash-safe Neotoma memory for any LLM agent loop."""

from __future__ import annotations

from ._util.lazy import lazy_exports

# The audit and its records live in neotoma_agent.qa; these names were also here before,
# and still resolve (with a DeprecationWarning) until the next minor release.
_MOVED_TO_QA = (
    "AttachmentObservation",
    "AuditReport",
    "Diagnosis",
    "Finding",
    "FindingKind",
    "MessageObservation",
    "RepairOutcome",
    "RepairResult",
    "ReportEntity",
    "ReportRepair",
    "TurnObservation",
    "TurnReportInput",
    "apply_repairs",
    "audit",
    "diagnose_turn",
    "render_turn_report",
)

# The public names, one line each (tests/test_public_api.py pins them). Each is imported
# when first used, so `import neotoma_agent` loads no part the program does not use (see
# _lazy); type checkers and readers see the ordinary imports. Add a name as one more line.
with lazy_exports(globals(), moved=dict.fromkeys(_MOVED_TO_QA, "neotoma_agent.qa")):
    # The four names a reader starts with come first: the API reference renders the names
    # in this order (docs/reference/index.md; tests/test_docs_reference.py).
    from ._memory import NeotomaMemory as NeotomaMemory
    from ._turn import Turn as Turn
    from .transport.embedded import EmbeddedStore as EmbeddedStore
    from .transport.http import HttpTransport as HttpTransport

    # isort: split
    from ._current import current_turn as current_turn
    from ._neotoma.forget import Forgotten as Forgotten
    from ._neotoma.undeclared import expect_undeclared_fields as expect_undeclared_fields
    from ._open_turn import OpenTurn as OpenTurn
    from ._recall.chat_messages import chat_messages as chat_messages
    from ._recall.history import HistoryTurn as HistoryTurn
    from ._recall.retrieval import Extractor as Extractor
    from ._recall.retrieval import RetrievalQuery as RetrievalQuery
    from ._recall.retrieval import RetrievalStats as RetrievalStats
    from ._recall.retrieval import Retrieved as Retrieved
    from ._recall.retrieval import RetrievedEntity as RetrievedEntity
    from ._recall.retrieval import Retriever as Retriever
    from ._recall.retrieval import default_extractor as default_extractor
    from ._recall.tool_reads import StoredToolCall as StoredToolCall
    from ._records.payloads import Produced as Produced
    from ._records.tool_payload import ToolRedactor as ToolRedactor
    from ._records.tools import ActiveToolCall as ActiveToolCall
    from ._records.tools import ToolCall as ToolCall
    from ._records.user_id import LOCAL_USER_ID as LOCAL_USER_ID
    from ._records.user_id import check_user_id as check_user_id
    from ._turn_result import TurnResult as TurnResult
    from ._turn_result import TurnState as TurnState
    from ._version import __version__ as __version__
    from .exceptions import APIError as APIError
    from .exceptions import AuthenticationError as AuthenticationError
    from .exceptions import ConnectionLost as ConnectionLost
    from .exceptions import ConnectTimeout as ConnectTimeout
    from .exceptions import EmptySearchQueryError as EmptySearchQueryError
    from .exceptions import IdempotencyMismatchError as IdempotencyMismatchError
    from .exceptions import InvalidEntityIdError as InvalidEntityIdError
    from .exceptions import InvalidUserIdError as InvalidUserIdError
    from .exceptions import NeotomaError as NeotomaError
    from .exceptions import NotFoundError as NotFoundError
    from .exceptions import OutboxError as OutboxError
    from .exceptions import OutboxFullError as OutboxFullError
    from .exceptions import RateLimitedError as RateLimitedError
    from .exceptions import ReadTimeout as ReadTimeout
    from .exceptions import ServerError as ServerError
    from .exceptions import ToolCallConflictError as ToolCallConflictError
    from .exceptions import TransportError as TransportError
    from .exceptions import TurnCloseError as TurnCloseError
    from .exceptions import TurnStateError as TurnStateError
    from .exceptions import UndeclaredFieldWarning as UndeclaredFieldWarning
    from .exceptions import ValidationError as ValidationError
    from .exceptions import error_class_name as error_class_name
    from .exceptions import error_label as error_label
    from .transport._base import ConversationMessage as ConversationMessage
    from .transport._base import ConversationPage as ConversationPage
    from .transport._base import ConversationReader as ConversationReader
    from .transport._base import ConversationSummaryItem as ConversationSummaryItem
    from .transport._base import ConversationSummaryPage as ConversationSummaryPage
    from .transport._base import CorrectionResult as CorrectionResult
    from .transport._base import CreateRelationshipsResult as CreateRelationshipsResult
    from .transport._base import Entity as Entity
    from .transport._base import EntityDeleter as EntityDeleter
    from .transport._base import EntityDeletion as EntityDeletion
    from .transport._base import EntityQueryResult as EntityQueryResult
    from .transport._base import EntitySnapshot as EntitySnapshot
    from .transport._base import LookupResult as LookupResult
    from .transport._base import Observation as Observation
    from .transport._base import ObservationList as ObservationList
    from .transport._base import RecentConversation as RecentConversation
    from .transport._base import RelatedEntities as RelatedEntities
    from .transport._base import RelatedEntity as RelatedEntity
    from .transport._base import RelationshipSnapshot as RelationshipSnapshot
    from .transport._base import SearchReader as SearchReader
    from .transport._base import StoredEntity as StoredEntity
    from .transport._base import StoreResult as StoreResult
    from .transport._base import SummaryReader as SummaryReader
    from .transport._base import Transport as Transport
    from .transport._outbox import LaneStatus as LaneStatus
    from .transport._outbox import OutboxFlush as OutboxFlush
    from .transport._outbox import OutboxStatus as OutboxStatus
    from .transport._outbox import outbox_status as outbox_status
    from .transport._search_results import SearchHit as SearchHit
    from .transport._search_results import SearchHitKind as SearchHitKind
    from .transport._search_results import SearchResult as SearchResult
    from .transport.embedded import ForgottenUser as ForgottenUser
    from .transport.embedded import PurgeStats as PurgeStats
    from .transport.embedded import UserStore as UserStore
    from .transport.embedded import purge_entities as purge_entities
    from .transport.embedded import purge_forgotten as purge_forgotten
    from .transport.embedded import purge_user as purge_user
    from .transport.http import RetryPolicy as RetryPolicy
    from .transport.http import flush_outbox as flush_outbox
    from .transport.outbox import OutboxTransport as OutboxTransport
    from .wrap import AgentReply as AgentReply
    from .wrap import AgentStream as AgentStream
    from .wrap import MemoryAgent as MemoryAgent
    from .wrap import StoppedEarly as StoppedEarly
    from .wrap import with_memory as with_memory
