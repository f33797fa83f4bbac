"""Protocol QA: diagnose a turn, repair it, report it, and audit a whole store.

- :func:`diagnose_turn` checks one turn (a :class:`TurnObservation`, or ``t.result``) and
  returns a checklist of :class:`Diagnosis`, each problem with a suggested repair;
- :func:`apply_repairs` runs those repairs idempotently and records one ``neotoma_repair``;
- :func:`render_turn_report` renders the markdown "🧠 Neotoma" section of a reply
  (``render_turn_report(t.result)`` works as is);
- :func:`audit` reads a store back (embedded or a server, through the Transport) and finds
  every turn that broke "both halves or neither", e.g. the orphans a crash leaves; with
  ``repair=True`` it closes them as abandoned (reason ``orphan_found_by_audit``).
"""

from __future__ import annotations

from ._actions import (
    AUDIT_REPAIR_REASON,
    AbandonTurn,
    CompleteTurn,
    LinkToConversation,
    RepairAction,
    StoreAssistantMessage,
    StoreAttachment,
    StoreUserMessage,
)
from ._audit import (
    AUDIT_DEFAULT_MIN_AGE,
    AuditReport,
    Finding,
    FindingKind,
    FindingSeverity,
    audit,
)
from ._diagnose import (
    AttachmentObservation,
    Diagnosis,
    MessageObservation,
    Severity,
    TurnObservation,
    diagnose_turn,
)
from ._repair import RepairOutcome, RepairResult, RepairStatus, apply_repairs
from ._report import (
    ReportEntity,
    ReportRepair,
    TurnReportInput,
    render_turn_report,
    resolve_inspector_base_url,
    resolve_ui_url,
)

__all__ = [  # sorted
    "AUDIT_DEFAULT_MIN_AGE",
    "AUDIT_REPAIR_REASON",
    "AbandonTurn",
    "AttachmentObservation",
    "AuditReport",
    "CompleteTurn",
    "Diagnosis",
    "Finding",
    "FindingKind",
    "FindingSeverity",
    "LinkToConversation",
    "MessageObservation",
    "RepairAction",
    "RepairOutcome",
    "RepairResult",
    "RepairStatus",
    "ReportEntity",
    "ReportRepair",
    "Severity",
    "StoreAssistantMessage",
    "StoreAttachment",
    "StoreUserMessage",
    "TurnObservation",
    "TurnReportInput",
    "apply_repairs",
    "audit",
    "diagnose_turn",
    "render_turn_report",
    "resolve_inspector_base_url",
    "resolve_ui_url",
]
