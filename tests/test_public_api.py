"""The public surface is explicit: adding or dropping a name must be a deliberate change."""

from __future__ import annotations

import importlib.metadata
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

import neotoma_agent

EXPECTED = {
    "LaneStatus",
    "OutboxError",
    "OutboxFlush",
    "OutboxFullError",
    "OutboxStatus",
    "OutboxTransport",
    "flush_outbox",
    "outbox_status",
    "audit",
    "AuditReport",
    "Finding",
    "FindingKind",
    "diagnose_turn",
    "Diagnosis",
    "TurnObservation",
    "MessageObservation",
    "AttachmentObservation",
    "apply_repairs",
    "RepairOutcome",
    "RepairResult",
    "render_turn_report",
    "TurnReportInput",
    "ReportEntity",
    "ReportRepair",
    "NeotomaMemory",
    "HistoryTurn",
    "chat_messages",
    "OpenTurn",
    "ActiveToolCall",
    "StoredToolCall",
    "ToolCall",
    "ToolCallConflictError",
    "ToolRedactor",
    "current_turn",
    "Produced",
    "Extractor",
    "RetrievalQuery",
    "RetrievalStats",
    "Retrieved",
    "RetrievedEntity",
    "Retriever",
    "default_extractor",
    "Turn",
    "TurnResult",
    "TurnState",
    "HttpTransport",
    "RetryPolicy",
    "AgentReply",
    "AgentStream",
    "MemoryAgent",
    "StoppedEarly",
    "with_memory",
    "APIError",
    "AuthenticationError",
    "ConnectTimeout",
    "ConnectionLost",
    "CorrectionResult",
    "CreateRelationshipsResult",
    "EmbeddedStore",
    "Forgotten",
    "PurgeStats",
    "purge_forgotten",
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
    "error_class_name",
}


def test_all_is_pinned() -> None:
    assert set(neotoma_agent.__all__) == EXPECTED


def test_all_has_no_duplicates() -> None:
    assert len(neotoma_agent.__all__) == len(set(neotoma_agent.__all__))


def test_every_public_name_resolves_and_reports_the_package() -> None:
    for name in neotoma_agent.__all__:
        obj = getattr(neotoma_agent, name)
        if isinstance(obj, type):
            assert obj.__module__ == "neotoma_agent", name
            assert obj.__doc__, f"{name} has no docstring"


def test_error_tree() -> None:
    from neotoma_agent import exceptions as e

    assert issubclass(e.TransportError, e.NeotomaError)
    for cls in (e.ConnectTimeout, e.ReadTimeout, e.ConnectionLost):
        assert issubclass(cls, e.TransportError)
    for cls in (
        e.AuthenticationError,
        e.ValidationError,
        e.IdempotencyMismatchError,
        e.NotFoundError,
        e.RateLimitedError,
        e.ServerError,
    ):
        assert issubclass(cls, e.APIError)
        assert issubclass(cls, e.NeotomaError)
    assert issubclass(e.TurnStateError, e.NeotomaError)
    assert issubclass(e.TurnCloseError, e.NeotomaError)
    for name in e.__all__:
        assert name in (e.__doc__ or ""), f"{name} missing from the drawn tree"


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neotoma_agent", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: neotoma-agent")
    assert result.stderr == ""


def test_the_distribution_states_its_licence_and_pythons() -> None:
    meta = importlib.metadata.metadata("neotoma-agent")
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    classifiers = meta.get_all("Classifier") or []
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert meta["Requires-Python"] == ">=3.10"
    assert (Path(__file__).resolve().parents[1] / "LICENSE").read_text().startswith("MIT License")


def test_help_of_a_turn_names_no_private_type_and_a_direct_build_is_refused() -> None:
    text = pydoc.render_doc(neotoma_agent.Turn, renderer=pydoc.plaintext)
    for private in ("TurnKeys", "Phases", "Mapping"):
        assert private not in text
    with pytest.raises(TypeError, match=r"NeotomaMemory\.turn\(\)"):
        neotoma_agent.Turn()
