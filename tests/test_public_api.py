"""The public surface is explicit: adding or dropping a name must be a deliberate change."""

from __future__ import annotations

import collections
import enum
import importlib
import importlib.metadata
import inspect
import pydoc
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

import neotoma_agent

# The top level: the turn API, retrieval, transports, their results, and the errors.
EXPECTED = {
    # the turn API
    "NeotomaMemory",
    "Turn",
    "TurnResult",
    "TurnState",
    "OpenTurn",
    "HistoryTurn",
    "chat_messages",
    "current_turn",
    "Produced",
    "ToolCall",
    "ActiveToolCall",
    "StoredToolCall",
    "ToolRedactor",
    "Forgotten",
    "with_memory",
    "MemoryAgent",
    "AgentReply",
    "AgentStream",
    "StoppedEarly",
    # retrieval
    "Extractor",
    "Retriever",
    "RetrievalQuery",
    "RetrievalStats",
    "Retrieved",
    "RetrievedEntity",
    "default_extractor",
    # transports
    "Transport",
    "ConversationReader",
    "SummaryReader",
    "SearchReader",
    "EntityDeleter",
    "EmbeddedStore",
    "purge_forgotten",
    "purge_entities",
    "PurgeStats",
    # many users on one store
    "UserStore",
    "ForgottenUser",
    "purge_user",
    "LOCAL_USER_ID",
    "check_user_id",
    "HttpTransport",
    "RetryPolicy",
    "OutboxTransport",
    "flush_outbox",
    "outbox_status",
    "OutboxStatus",
    "OutboxFlush",
    "LaneStatus",
    # what transports return
    "StoreResult",
    "StoredEntity",
    "Entity",
    "EntityDeletion",
    "LookupResult",
    "EntitySnapshot",
    "EntityQueryResult",
    "Observation",
    "ObservationList",
    "RelationshipSnapshot",
    "CreateRelationshipsResult",
    "RelatedEntities",
    "RelatedEntity",
    "CorrectionResult",
    "ConversationMessage",
    "RecentConversation",
    "ConversationPage",
    "ConversationSummaryPage",
    "ConversationSummaryItem",
    "SearchResult",
    "SearchHit",
    "SearchHitKind",
    # errors
    "NeotomaError",
    "TransportError",
    "ConnectTimeout",
    "ReadTimeout",
    "ConnectionLost",
    "APIError",
    "AuthenticationError",
    "ValidationError",
    "IdempotencyMismatchError",
    "NotFoundError",
    "RateLimitedError",
    "ServerError",
    "TurnStateError",
    "TurnCloseError",
    "ToolCallConflictError",
    "EmptySearchQueryError",
    "InvalidEntityIdError",
    "InvalidUserIdError",
    "OutboxError",
    "OutboxFullError",
    "UndeclaredFieldWarning",
    "expect_undeclared_fields",
    "error_class_name",
    "error_label",
    "__version__",
}

# neotoma_agent.qa: diagnose, repair, report and audit, with every record they return.
EXPECTED_QA = {
    "audit",
    "AuditReport",
    "AUDIT_CLOSE_TIMEOUT",
    "AUDIT_DEFAULT_MIN_AGE",
    "AUDIT_REPAIR_REASON",
    "AUDIT_REPLY_MARGIN",
    "Finding",
    "FindingKind",
    "Severity",
    "diagnose_turn",
    "Diagnosis",
    "TurnObservation",
    "MessageObservation",
    "AttachmentObservation",
    "apply_repairs",
    "RepairResult",
    "RepairOutcome",
    "RepairStatus",
    "RepairAction",
    "AbandonTurn",
    "CompleteTurn",
    "LinkToConversation",
    "StoreUserMessage",
    "StoreAssistantMessage",
    "StoreAttachment",
    "render_turn_report",
    "TurnReportInput",
    "ReportEntity",
    "ReportRepair",
    "resolve_inspector_base_url",
    "resolve_ui_url",
}

EXPECTED_TESTING = {"Call", "FaultyTransport", "RecordingTransport", "key_phase"}
EXPECTED_SYNC = {"SyncMemory", "SyncStore", "SyncTurn", "current_turn"}
# neotoma_agent.log: the library's one event logger, for tools that log alongside it.
EXPECTED_LOG = {"LOGGER_NAME", "EventLogger", "get_logger"}
# neotoma_agent.batch: recording many finished turns at once (a transcript import).
EXPECTED_BATCH = {"BatchOutcome", "BatchStore", "BatchTurn", "record_batch"}
# neotoma_agent.files: owner-only files, written as the library writes its own.
EXPECTED_FILES = {
    "DIR_MODE",
    "FILE_MODE",
    "private_dir",
    "private_file",
    "replace_private",
    "write_private",
}
# neotoma_agent.forget: forgetting over any transport (what NeotomaMemory.forget runs).
EXPECTED_FORGET = {
    "check_entity_id",
    "forget_conversation",
    "forget_entity",
    "forget_planned",
    "plan_forget",
    "restore_conversation",
    "restore_entity",
}
# neotoma_agent.transport.rest: the REST shapes HttpTransport and the dev server share.
EXPECTED_REST = {
    "DIRECTIONS",
    "MAX_DEPTH",
    "OBSERVATION_SOURCES",
    "SEARCH_ACTION",
    "check_text",
    "envelope_of",
    "flat_envelope",
    "html_error_page",
    "is_storable",
    "json_type",
    "present",
    "rest_request",
    "store_arguments",
    "store_body",
}
# neotoma_agent.reads: reading a store (conversations, entities, turn endings, derived ids).
EXPECTED_READS = {
    "AUDIT_REPAIR_REASON",
    "IdentityError",
    "summarize_payload",
    "BOOKKEEPING_TYPES",
    "PAGE_SIZE",
    "READ_CONCURRENCY",
    "TOOL_TYPE",
    "BulkReader",
    "ConversationList",
    "ConversationSummary",
    "MessageRows",
    "RecordSink",
    "Scan",
    "StoreStats",
    "StoredConversation",
    "StoredMessage",
    "StoredTurn",
    "TurnEnding",
    "TurnView",
    "TurnRole",
    "bulk_reader",
    "collect_stats",
    "conversation_entity_id",
    "ending_of",
    "gather_bounded",
    "identify",
    "is_entity_id",
    "list_conversations",
    "message_entity_id",
    "parse_turn_key",
    "printable",
    "printer",
    "read_conversation",
    "read_ending",
    "scan_entities",
    "search",
    "short_class",
    "snapshot_or_none",
    "stored_platform",
    "tenant_for",
    "turn_ending",
    "turn_key",
    "turn_record_entity_id",
    "validate_conversation_id",
    "validate_entity_id",
    "validate_turn_id",
}

# The wings' own namespaces: what another wing (the cli, each wing's command front-end) and
# users take from them.
EXPECTED_HOOKS = {
    "BACKFILL_SOURCES",
    "HARNESSES",
    "BackfillReport",
    "BadInput",
    "Change",
    "Harness",
    "HookEvent",
    "HookOutcome",
    "HookState",
    "InstallError",
    "Kind",
    "PendingTurn",
    "StoreSpec",
    "backfill",
    "harness_module",
    "install",
    "installed",
    "run_hook",
    "uninstall",
}
EXPECTED_SERVER = {
    "DEFAULT_MAX_BODY_SIZE",
    "Caller",
    "Callers",
    "Handler",
    "Middleware",
    "allowed_hosts",
    "bind_socket",
    "create_app",
    "is_loopback_host",
    "local_guard",
    "run_server",
    "scoped_key",
    "serve",
    "serving",
    "store_for",
}
EXPECTED_UI = {"UI_PREFIX", "create_ui_app", "mount_ui", "standalone_app"}

# The names the top level had before the audit got its own namespace: they resolve, warning.
MOVED_TO_QA = {
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
}


def test_all_is_pinned() -> None:
    assert set(neotoma_agent.__all__) == EXPECTED


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("neotoma_agent.qa", EXPECTED_QA),
        ("neotoma_agent.testing", EXPECTED_TESTING),
        ("neotoma_agent.sync", EXPECTED_SYNC),
        ("neotoma_agent.reads", EXPECTED_READS),
        ("neotoma_agent.log", EXPECTED_LOG),
        ("neotoma_agent.forget", EXPECTED_FORGET),
        ("neotoma_agent.batch", EXPECTED_BATCH),
        ("neotoma_agent.files", EXPECTED_FILES),
        ("neotoma_agent.transport.rest", EXPECTED_REST),
    ],
)
def test_each_namespace_is_pinned(module: str, expected: set[str]) -> None:
    namespace = importlib.import_module(module)
    assert set(namespace.__all__) == expected
    for name in namespace.__all__:
        obj = getattr(namespace, name)
        # One home per object (sync.current_turn is the blocking twin, a different object).
        assert name not in EXPECTED or obj is not getattr(neotoma_agent, name), name
        if isinstance(obj, type):
            assert obj.__module__ == module, name
            assert obj.__doc__, f"{name} has no docstring"


@pytest.mark.parametrize("name", sorted(MOVED_TO_QA))
def test_a_name_that_moved_to_qa_still_resolves_with_a_deprecation_warning(name: str) -> None:
    import neotoma_agent.qa

    with pytest.warns(DeprecationWarning, match=rf"neotoma_agent\.{name} .* neotoma_agent\.qa"):
        old = getattr(neotoma_agent, name)
    assert old is getattr(neotoma_agent.qa, name)
    assert name not in neotoma_agent.__all__
    assert name not in dir(neotoma_agent)


def test_the_old_finding_severity_resolves_to_the_one_vocabulary() -> None:
    import neotoma_agent.qa

    with pytest.warns(DeprecationWarning, match="use neotoma_agent.qa.Severity"):
        assert neotoma_agent.qa.FindingSeverity is neotoma_agent.qa.Severity
    with pytest.raises(AttributeError):
        _ = neotoma_agent.qa.NoSuchName


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


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("neotoma_agent.hooks", EXPECTED_HOOKS),
        ("neotoma_agent.server", EXPECTED_SERVER),
        ("neotoma_agent.ui", EXPECTED_UI),
    ],
)
def test_each_wing_namespace_is_pinned(module: str, expected: set[str]) -> None:
    namespace = importlib.import_module(module)
    assert set(namespace.__all__) == expected
    for name in namespace.__all__:
        obj = getattr(namespace, name)
        if callable(obj) and obj.__module__.startswith("neotoma_agent"):
            assert obj.__doc__, f"{name} has no docstring"


def test_help_of_a_turn_names_no_private_type_and_a_direct_build_is_refused() -> None:
    text = pydoc.render_doc(neotoma_agent.Turn, renderer=pydoc.plaintext)
    for private in ("TurnKeys", "Phases", "Mapping"):
        assert private not in text
    with pytest.raises(TypeError, match=r"NeotomaMemory\.turn\(\)"):
        neotoma_agent.Turn()


# --- every type a public name returns can be imported from a public module ------------------

# The namespaces whose names are walked: every public one.
WALKED = (
    "neotoma_agent",
    "neotoma_agent.qa",
    "neotoma_agent.testing",
    "neotoma_agent.sync",
    "neotoma_agent.reads",
    "neotoma_agent.integrations",
    "neotoma_agent.ui",
    "neotoma_agent.server",
    "neotoma_agent.cli",
    "neotoma_agent.hooks",
)
# Where a returned type may be imported from: the walked namespaces and the public modules.
PUBLIC_MODULES = (
    *WALKED,
    "neotoma_agent.exceptions",
    "neotoma_agent.log",
    "neotoma_agent.forget",
    "neotoma_agent.batch",
    "neotoma_agent.files",
    "neotoma_agent.wrap",
    "neotoma_agent.transport.embedded",
    "neotoma_agent.transport.http",
    "neotoma_agent.transport.outbox",
    "neotoma_agent.transport.rest",
)


def _package_names() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("neotoma_agent"):
            for name, value in vars(module).items():
                found.setdefault(name, value)
    return found


#: every name of the package's modules, read once the walk has imported them all
_NAMES: dict[str, Any] = {}


def _hints(obj: Any, globalns: dict[str, Any]) -> dict[str, Any]:
    # Names a module imports only under TYPE_CHECKING come from any module that has them;
    # the module's own names win (two private classes may share a name).
    names = collections.ChainMap(globalns, _NAMES)
    return typing.get_type_hints(obj, globalns=globalns, localns=names)  # type: ignore[arg-type]


def _class_hints(cls: type) -> dict[str, Any]:
    # The module that defines the class (its __module__ names the public namespace).
    homes = [
        m
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("neotoma_agent")
        and vars(m).get(cls.__name__) is cls
    ]
    homes.sort(key=lambda m: ("._" not in m.__name__, -len(m.__name__)))
    for home in homes:
        try:
            return _hints(cls, vars(home))
        except NameError:
            continue
    raise AssertionError(f"cannot read the annotations of {cls!r}")


def _classes_in(annotation: Any, out: set[type]) -> None:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        out.add(annotation)
    for arg in typing.get_args(annotation):
        for item in arg if isinstance(arg, list) else [arg]:
            _classes_in(item, out)


def _returned(obj: Any) -> set[type]:
    """The classes ``obj`` hands out: its return type, or a class's public fields,
    properties and method results."""
    out: set[type] = set()
    if isinstance(obj, type):
        if issubclass(obj, enum.Enum):
            return out
        if attrs.has(obj):
            for name, hint in _class_hints(obj).items():
                if not name.startswith("_"):
                    _classes_in(hint, out)
        for name in dir(obj):
            if name.startswith("_") and name not in ("__aenter__", "__enter__", "__iter__"):
                continue
            member = inspect.getattr_static(obj, name, None)
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)
            if inspect.isfunction(function) and function.__module__.startswith("neotoma_agent"):
                # A wrapper's annotations were written where the wrapped function lives.
                home = inspect.unwrap(function).__globals__
                _classes_in(_hints(function, home).get("return"), out)
    elif inspect.isfunction(obj):
        _classes_in(_hints(obj, obj.__globals__).get("return"), out)
    return out


def test_every_type_a_public_name_returns_is_importable_from_a_public_module() -> None:
    reachable: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        reachable.update(id(getattr(module, n)) for n in module.__all__)
    _NAMES.update(_package_names())
    todo = [
        (getattr(module, n), f"{name}.{n}")
        for name in WALKED
        for module in [importlib.import_module(name)]
        for n in module.__all__
    ]
    seen: set[int] = set()
    unreachable: dict[str, str] = {}
    walked = 0
    while todo:
        obj, where = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        walked += 1
        for cls in _returned(obj):
            if not cls.__module__.startswith("neotoma_agent"):
                continue
            if id(cls) not in reachable:
                unreachable.setdefault(f"{cls.__module__}.{cls.__qualname__}", where)
            todo.append((cls, cls.__qualname__))
    assert not unreachable, f"returned but not importable from a public module: {unreachable}"
    assert walked > 100  # the walk reached the records the public names return
