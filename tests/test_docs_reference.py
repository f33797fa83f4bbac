"""The API reference covers every public module, names only modules that exist, and the
Python examples in the docstrings it renders are Python.

The reference pages (docs/reference/*.md) are ``::: module`` lines that mkdocstrings
renders from the docstrings; this keeps them in step with the package: a new public module
(a path with no ``_`` part) without a page fails here, as does a page for a module gone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Iterator

import pytest
from paths_support import ROOT

import neotoma_agent

PACKAGE = ROOT / "neotoma_agent"
DIRECTIVE = re.compile(r"^::: ([\w.]+)$", re.M)


def public_modules() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            names.add(".".join(parts))
    return names


def documented() -> set[str]:
    pages = (ROOT / "docs" / "reference").glob("*.md")
    return {name for page in pages for name in DIRECTIVE.findall(page.read_text("utf-8"))}


def test_every_public_module_has_a_reference_entry() -> None:
    modules = public_modules()
    assert {"neotoma_agent", "neotoma_agent.sync", "neotoma_agent.testing"} <= modules
    assert modules - documented() == set()


def test_the_reference_names_only_public_modules() -> None:
    assert documented() - public_modules() == set()


#: the first line of a literal block that is meant as Python (not a shell line, JSON, text)
PYTHON_START = re.compile(
    r"^(from |import |async |await |with |for |if |def |class |print\("
    r"|[A-Za-z_][\w.]*\s*(=|\(|\.|\[|\+=))"
)


def literal_blocks(doc: str) -> Iterator[str]:
    """The reST literal blocks (the indented text after a line ending in ``::``)."""
    lines = inspect.cleandoc(doc).split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        base = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base
        ):
            j += 1
        yield textwrap.dedent("\n".join(lines[i + 1 : j])).strip("\n")
        i = j


def documented_objects() -> Iterator[tuple[str, object]]:
    """Every module of the package that imports here, and what it defines."""
    for info in pkgutil.walk_packages(neotoma_agent.__path__, "neotoma_agent."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an integration whose framework is not installed
            continue
        yield info.name, module
        for value in vars(module).values():
            if getattr(value, "__module__", None) != info.name:
                continue
            yield info.name, value
            if inspect.isclass(value):
                for member in vars(value).values():
                    yield info.name, member


def test_the_docstrings_python_examples_compile() -> None:
    """A ``\\n`` written as ``\n`` in a docstring's example splits its string in two."""
    checked = 0
    seen: set[int] = set()
    for where, obj in documented_objects():
        doc = getattr(obj, "__doc__", None)
        if not isinstance(doc, str) or id(obj) in seen:
            continue
        seen.add(id(obj))
        for block in literal_blocks(doc):
            if PYTHON_START.match(block):
                checked += 1
                try:
                    compile(block, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                except SyntaxError as exc:
                    raise AssertionError(f"{where}: {exc.msg}\n{block}") from None
    assert checked > 30


#: what a reader of the API reference needs first, in this order
FIRST_NAMES = ["NeotomaMemory", "Turn", "EmbeddedStore", "HttpTransport"]


def test_the_api_reference_opens_with_the_names_a_reader_starts_with() -> None:
    # mkdocstrings renders the package's names in the order of its import lines (members
    # in source order, classes first): the reference must open with NeotomaMemory, not
    # with whichever class sorts first.
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    assert re.search(r"^\s+members_order: source$", config, re.M)
    assert "::: neotoma_agent\n" in (ROOT / "docs" / "reference" / "index.md").read_text("utf-8")
    tree = ast.parse((PACKAGE / "__init__.py").read_text("utf-8"))
    names = [
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
        if alias.asname == alias.name
    ]
    classes = [n for n in names if inspect.isclass(getattr(neotoma_agent, n))]
    assert classes[: len(FIRST_NAMES)] == FIRST_NAMES


def _loaded_with_the_reference_extensions() -> object:
    """The package as mkdocs.yml's griffe extensions present it to the API reference."""
    griffe = pytest.importorskip("griffe")  # the docs extra
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    # griffe's own unpack_typeddict lists a TypedDict's keys; ours runs before its events
    names = ["unpack_typeddict", "scripts/docs_signatures.py:SharedSignatures"]
    assert all(f"- {name}\n" in config for name in names)
    extensions = griffe.load_extensions(
        "unpack_typeddict", str(ROOT / "scripts" / "docs_signatures.py")
    )
    return griffe.load("neotoma_agent", search_paths=[str(ROOT)], extensions=extensions)


def _shown(package: object, path: str) -> tuple[list[str], str]:
    function = package[path]  # type: ignore[index]
    return [p.name for p in function.parameters], str(function.returns)


def test_the_reference_shows_every_parameter_of_a_signature_stated_once() -> None:
    # A keyword signature stated once (a TypedDict of options, another method's arguments,
    # a sync method made from an async one) is listed parameter by parameter, as type
    # checkers and editors show it, never as **options or *args, **kwargs.
    package = _loaded_with_the_reference_extensions()
    options = ["turn_id", "turn_number", "user_extra", "revision"]
    assert _shown(package, "NeotomaMemory.turn") == (
        ["self", "user_message", *options, "model"],
        "Turn",
    )
    assert _shown(package, "sync.SyncMemory.turn") == (
        ["self", "user_message", *options, "model"],
        "SyncTurn",
    )
    assert _shown(package, "MemoryAgent.stream") == (
        ["self", "user_message", *options],
        "AgentStream",
    )
    assert _shown(package, "sync.SyncMemory.open_turn")[1] == "OpenTurn"
    assert "refers_to" in _shown(package, "NeotomaMemory.close_turn")[0]
    tool = ["self", "name", "args", "result", "status", "invoked_at", "duration_ms", "call_id"]
    for recorder in (
        "OpenTurn.record_tool",
        "_turn_tools.TurnTools.record_tool",
        "sync.SyncTurn.record_tool",
    ):
        assert _shown(package, recorder) == ([*tool, "error_class"], "ToolCall")
    context = ["self", "max_chars", "history", "max_tokens", "count_tokens"]
    assert _shown(package, "OpenTurn.context") == (context, "str")
    assert _shown(package, "sync.SyncTurn.context") == (context, "str")


def test_an_entry_point_taking_anothers_arguments_shows_them_all() -> None:
    # ainvoke_turn is astream_turn run to its end, run is run_streamed awaited: each pair's
    # parameters are stated once (integrations._common.args_of), and shown whole by the
    # reference, inspect.signature and help(), never as *args, **kwargs.
    pytest.importorskip("langgraph")
    pytest.importorskip("agents")
    from neotoma_agent.integrations import langgraph, openai_agents

    package = _loaded_with_the_reference_extensions()
    pairs = (
        ("integrations.langgraph.ainvoke_turn", "integrations.langgraph.astream_turn"),
        ("integrations.openai_agents.run", "integrations.openai_agents.run_streamed"),
    )
    for entry, twin in pairs:
        shown = _shown(package, entry)[0]
        assert shown == _shown(package, twin)[0]
        assert shown[:3] in (["graph", "input", "memory"], ["agent", "input", "memory"])
    for entry, twin, returns in (
        (langgraph.ainvoke_turn, langgraph.astream_turn, "TurnStream"),
        (openai_agents.run, openai_agents.run_streamed, "AgentsRun"),
    ):
        signature = inspect.signature(entry)
        assert signature.parameters == inspect.signature(twin).parameters
        assert signature.return_annotation == returns
