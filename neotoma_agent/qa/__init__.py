"""Protocol QA: diagnose a turn, repair it, report it, and audit a whole store.

- :func:`diagnose_turn` checks one turn (a :class:`TurnObservation`, or ``t.result``) and
  returns a checklist of :class:`Diagnosis`, each problem with a suggested repair;
- :func:`apply_repairs` runs those repairs idempotently and records one ``neotoma_repair``;
- :func:`render_turn_report` renders the markdown "🧠 Neotoma" section of a reply
  (``render_turn_report(t.result)`` works as is);
- :func:`audit` reads a store back (embedded or a server, through the Transport) and finds
  every turn that broke "both halves or neither", e.g. the orphans a crash leaves; with
  ``repair=True`` it closes them as abandoned (reason ``orphan_found_by_audit``). An open
  turn younger than its ``min_age`` may still be running and is left alone
  (:attr:`AuditReport.skipped_reason`); the default, :data:`AUDIT_DEFAULT_MIN_AGE`, is
  :data:`AUDIT_CLOSE_TIMEOUT` (``NeotomaMemory``'s ``close_timeout``) plus
  :data:`AUDIT_REPLY_MARGIN` (an agent still writing its reply).

One vocabulary grades them all: :class:`Severity` (``info``: nothing to fix; ``warn``;
``error``) on a :class:`Diagnosis`, a :class:`Finding` and a report line. A whole run is a
``*Result`` (:class:`AuditReport`, :class:`RepairResult`), holding one ``*Outcome`` per item
(:class:`RepairOutcome`, with its :class:`RepairStatus`).
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
    AUDIT_CLOSE_TIMEOUT,
    AUDIT_DEFAULT_MIN_AGE,
    AUDIT_REPLY_MARGIN,
    AuditReport,
    Finding,
    FindingKind,
    audit,
)
from ._diagnose import (
    AttachmentObservation,
    Diagnosis,
    MessageObservation,
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
from ._severity import Severity

__all__ = [  # sorted
    "AUDIT_CLOSE_TIMEOUT",
    "AUDIT_DEFAULT_MIN_AGE",
    "AUDIT_REPAIR_REASON",
    "AUDIT_REPLY_MARGIN",
    "AbandonTurn",
    "AttachmentObservation",
    "AuditReport",
    "CompleteTurn",
    "Diagnosis",
    "Finding",
    "FindingKind",
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

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) or callable(_value):
        # Reprs and help() name the namespace users import from, not the private module.
        _value.__module__ = __name__
del _name, _value

# Old names, importable with a DeprecationWarning (one vocabulary replaced them).
_MOVED = {"FindingSeverity": ("Severity", Severity)}


def __getattr__(name: str) -> object:
    moved = _MOVED.get(name)
    if moved is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    new, value = moved
    warnings.warn(
        f"{__name__}.{name} is deprecated: use {__name__}.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
