"""The package's layout holds the line: ``scripts/layout_report.py``'s ceilings, as a ratchet.

No import cycle beyond the ones listed, no module over 700 lines beyond the ones listed (and
those do not grow), no more ``nonlocal`` in the core and no wing importing more private core
modules than today, no wing importing another wing's private modules beyond today's, no core
module importing a wing. A ceiling above today's figure fails
too, so an improvement is locked in: lower the ceiling in ``CEILINGS`` in the same commit.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from paths_support import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "layout_report", ROOT / "scripts" / "layout_report.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("layout_report", module)
    spec.loader.exec_module(module)
    return module


layout = _load()


@pytest.fixture(scope="module")
def today() -> Any:
    return layout.measure()


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of the package to break, one way per test."""
    copy = tmp_path / "neotoma_agent"
    shutil.copytree(ROOT / "neotoma_agent", copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _file(package: Path, module: str) -> Path:
    """The file of the module ``module`` (dotted, as an import names it) in ``package``: the
    tests name modules as imports do, so a module that moves is renamed in one way."""
    return package.joinpath(*module.split(".")[1:]).with_suffix(".py")


def _cycle(*modules: str) -> str:
    """A cycle as the report words it: its modules sorted."""
    return "new import cycle " + " <-> ".join(sorted(modules))


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_the_layout_holds_the_line(today: Any) -> None:
    found = layout.violations(today)
    assert not found, "\n".join(found)


def test_no_ceiling_is_above_todays_figure(today: Any) -> None:
    """Lowering is welcome, and once done it stays: a ceiling above today's figure is lowered."""
    ceilings = layout.CEILINGS
    gone = [c for c in ceilings["import_cycles"] if c not in today.import_cycles]
    assert not gone, (
        f"import cycles are gone ({gone}): remove them from CEILINGS['import_cycles'] "
        "in scripts/layout_report.py"
    )
    shorter = {
        name: today.long_modules.get(name, "700 or fewer")
        for name, lines in ceilings["long_modules"].items()
        if today.long_modules.get(name, 0) < lines
    }
    assert not shorter, (
        f"long modules got shorter ({shorter}): lower or remove their lines in "
        "CEILINGS['long_modules'] in scripts/layout_report.py"
    )
    assert len(today.root_private_modules) >= ceilings["root_private_modules"], (
        "fewer private modules at the package root: lower CEILINGS['root_private_modules'] "
        "in scripts/layout_report.py"
    )
    assert today.counts()["core_nonlocal"] >= ceilings["core_nonlocal"], (
        "the core has fewer `nonlocal` statements: lower CEILINGS['core_nonlocal'] in "
        "scripts/layout_report.py"
    )
    counts = {wing: len(pairs) for wing, pairs in today.wing_private_imports.items()}
    fewer = {wing: n for wing, n in counts.items() if n < ceilings["wing_private_imports"][wing]}
    assert not fewer, (
        f"wings import fewer private core modules ({fewer}): lower their ceilings in "
        "CEILINGS['wing_private_imports'] in scripts/layout_report.py"
    )
    cross = {wing: len(pairs) for wing, pairs in today.wing_cross_imports.items()}
    fewer = {wing: n for wing, n in cross.items() if n < ceilings["wing_cross_imports"][wing]}
    assert not fewer, (
        f"wings import fewer private modules of other wings ({fewer}): lower their ceilings "
        "in CEILINGS['wing_cross_imports'] in scripts/layout_report.py"
    )


def test_an_import_inside_a_function_is_a_cycle_too(package: Path) -> None:
    # http imports outbox at the top; outbox importing http inside a function closes a loop
    _append(
        package / "transport" / "outbox.py",
        "\n\ndef _http() -> object:\n    from .http import HttpTransport\n\n"
        "    return HttpTransport\n",
    )
    found = layout.violations(layout.measure(package))
    assert len(found) == 1
    assert (
        "new import cycle neotoma_agent.transport.http <-> neotoma_agent.transport.outbox"
        in found[0]
    )


def test_an_import_under_type_checking_is_a_cycle_too(package: Path) -> None:
    # a type-only import back ties the two modules together
    _append(
        _file(package, "neotoma_agent._util.clock"),
        "\nfrom typing import TYPE_CHECKING  # noqa: E402\n\n"
        "if TYPE_CHECKING:\n"
        "    from neotoma_agent._records.tools import ToolLog  # noqa: F401\n",
    )
    found = layout.violations(layout.measure(package))
    assert len(found) == 1
    assert _cycle("neotoma_agent._util.clock", "neotoma_agent._records.tools") in found[0]


def test_a_new_import_cycle_fails(package: Path) -> None:
    # _tools imports _clock; an import back inside a function closes a cycle
    _append(
        _file(package, "neotoma_agent._util.clock"),
        "\n\ndef _back() -> None:\n    from neotoma_agent._records.tools import ToolLog\n",
    )
    found = layout.violations(layout.measure(package))
    assert len(found) == 1
    assert _cycle("neotoma_agent._util.clock", "neotoma_agent._records.tools") in found[0]
    assert "move what they share" in found[0]


def test_a_new_private_import_in_a_wing_fails(package: Path, today: Any) -> None:
    before = len(today.wing_private_imports["integrations"])
    _append(
        package / "integrations" / "_common.py",
        "\nfrom neotoma_agent._util.clock import now_ms  # noqa: E402,F401\n",
    )
    report = layout.measure(package)
    assert len(report.wing_private_imports["integrations"]) == before + 1
    found = layout.violations(report)
    assert len(found) == 1
    assert (
        f"the integrations wing imports private core modules {before + 1} times "
        f"(ceiling {before})" in found[0]
    )
    assert "do not raise the ceiling" in found[0]


@pytest.mark.parametrize(
    ("wing", "module"),
    [("cli", "_show"), ("cli", "_hook"), ("qa", "_scan"), ("hooks", "_run")],
)
def test_a_private_import_outside_a_wings_core_module_fails(
    package: Path, today: Any, wing: str, module: str
) -> None:
    """cli, qa and hooks import private core modules through their ``_core.py`` only: one
    anywhere else fails, even one ``_core.py`` already imports (the count stays the same)."""
    held = today.wing_private_imports[wing]
    kept = held[0][1].removeprefix("neotoma_agent.")  # a module the wing's _core imports
    _append(
        package / wing / f"{module}.py",
        f"\nimport neotoma_agent.{kept}  # noqa: E402,F401\n",
    )
    report = layout.measure(package)
    src = f"neotoma_agent.{wing}.{module}"
    assert [src, f"neotoma_agent.{kept}"] in report.wing_private_imports[wing]
    # with room under the ceiling, the door alone fails it
    ceilings = {**layout.CEILINGS["wing_private_imports"], wing: len(held) + 1}
    found = layout.violations(report, {**layout.CEILINGS, "wing_private_imports": ceilings})
    assert found == [
        f"{src} imports the private core module neotoma_agent.{kept} outside "
        f"{wing}/_core.py: use the public API (neotoma_agent, neotoma_agent.reads, its "
        f"public modules); a name the {wing} wing genuinely needs privately goes through "
        f"{wing}/_core.py, named with its reason in CONTRIBUTING"
    ]


def test_a_new_private_import_in_a_wings_core_module_still_counts(
    package: Path, today: Any
) -> None:
    held = len(today.wing_private_imports["qa"])
    _append(
        package / "qa" / "_core.py",
        "\nfrom neotoma_agent._util.clock import now_ms  # noqa: E402,F401\n",
    )
    found = layout.violations(layout.measure(package))
    assert len(found) == 1
    assert f"the qa wing imports private core modules {held + 1} times (ceiling {held})" in found[0]


@pytest.mark.parametrize(
    ("wing", "module"), [("ui", "_html"), ("server", "_app"), ("sync", "_store")]
)
def test_a_wing_on_public_names_only_fails_on_any_private_import(
    package: Path, today: Any, wing: str, module: str
) -> None:
    """server, ui and sync import no private core module: the first one fails, wherever it is."""
    assert today.wing_private_imports[wing] == []
    _append(
        package / wing / f"{module}.py",
        "\nfrom neotoma_agent._util.clock import now_ms  # noqa: E402,F401\n",
    )
    found = layout.violations(layout.measure(package))
    assert len(found) == 1
    assert f"the {wing} wing imports private core modules 1 times (ceiling 0)" in found[0]


def test_a_qa_module_importing_a_private_core_module_fails(package: Path, today: Any) -> None:
    # the audit reads through neotoma_agent.reads; a private read module is one more import
    held = len(today.wing_private_imports["qa"])
    _append(
        package / "qa" / "_scan.py",
        "\nfrom neotoma_agent._recall.paged import scan_entities  # noqa: E402,F401,F811\n",
    )
    report = layout.measure(package)
    assert ["neotoma_agent.qa._scan", "neotoma_agent._recall.paged"] in report.wing_private_imports[
        "qa"
    ]
    found = layout.violations(report)
    assert len(found) == 2
    assert f"the qa wing imports private core modules {held + 1} times (ceiling {held})" in found[0]
    assert "outside qa/_core.py" in found[1]


@pytest.mark.parametrize(
    ("wing", "module", "other"),
    [
        ("ui", "_app", "neotoma_agent.server._guard"),
        ("ui", "_views", "neotoma_agent.cli._show"),
        ("qa", "_scan", "neotoma_agent.hooks._state"),
        ("server", "_app", "neotoma_agent.ui._views"),
    ],
)
def test_a_wing_importing_another_wings_private_module_fails(
    package: Path, today: Any, wing: str, module: str, other: str
) -> None:
    """A wing uses another wing by its public names (the web view reaching into the server's
    guard or the cli's printing is one wing leaning on another's internals)."""
    held = len(today.wing_cross_imports[wing])
    _append(package / wing / f"{module}.py", f"\nimport {other}  # noqa: E402,F401\n")
    report = layout.measure(package)
    assert [f"neotoma_agent.{wing}.{module}", other] in report.wing_cross_imports[wing]
    # not a private *core* import: the core figure does not move
    assert report.wing_private_imports == today.wing_private_imports
    found = layout.violations(report)
    assert found == [
        f"the {wing} wing imports private modules of other wings {held + 1} times "
        f"(ceiling {held}): use the other wing's public names (its package's __all__), or "
        "add what is needed there, documented; do not raise the ceiling in "
        "scripts/layout_report.py"
    ]


def test_a_wing_importing_another_wings_public_names_is_not_counted(package: Path) -> None:
    _append(
        package / "ui" / "_html.py",
        "\nfrom neotoma_agent.server import local_guard  # noqa: E402,F401\n"
        "from neotoma_agent.qa import audit  # noqa: E402,F401\n",
    )
    report = layout.measure(package)
    assert report.wing_cross_imports["ui"] == []
    assert layout.violations(report) == []


def test_contributing_names_every_private_module_a_wing_takes_from_another(today: Any) -> None:
    """Every private module of another wing a wing imports is named, with its reason, in
    CONTRIBUTING (and nothing more is): today none, the cli's command front-ends included."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("- **Other wings' private modules a wing takes**")
    paragraph = " ".join(text[start : text.index("\n\n", start)].split())
    named = set(re.findall(r"`((?:qa|hooks|server|ui|sync|integrations)\._[a-z_]+)`", paragraph))
    taken = {
        dst.removeprefix("neotoma_agent.")
        for pairs in today.wing_cross_imports.values()
        for _, dst in pairs
    }
    assert taken == named == set()


def _kept_paragraph() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("- **Private imports a wing keeps**")
    return " ".join(text[start : text.index("\n\n", start)].split())


def _kept_by_wing() -> dict[str, set[str]]:
    """Per wing, the private core modules the paragraph names after "`<wing>/_core` takes":
    the names in backticks below the package with a ``_``-prefixed part."""
    parts = re.split(r"`(\w+)/_core` takes", _kept_paragraph())
    return {
        wing: {
            name
            for name in re.findall(r"`((?:_?[a-z][a-z_]*\.)*_?[a-z][a-z_]*)`", text)
            if any(part.startswith("_") for part in name.split("."))
        }
        for wing, text in zip(parts[1::2], parts[2::2], strict=True)
    }


def test_contributing_names_the_private_imports_of_each_wing_with_a_core_module() -> None:
    assert set(_kept_by_wing()) == set(layout.DOORS)


@pytest.mark.parametrize("wing", layout.DOORS)
def test_a_wing_keeps_only_the_private_imports_contributing_names(today: Any, wing: str) -> None:
    pairs = today.wing_private_imports[wing]
    assert {wing_module for wing_module, _ in pairs} == {f"neotoma_agent.{wing}._core"}
    named = _kept_by_wing()[wing]
    assert {private.removeprefix("neotoma_agent.") for _, private in pairs} == named


def test_a_wing_importing_its_own_private_modules_and_the_public_api_is_not_counted(
    package: Path, today: Any
) -> None:
    _append(
        package / "ui" / "_html.py",
        "\nfrom neotoma_agent import Turn  # noqa: E402,F401\n"
        "from neotoma_agent.transport.http import HttpTransport  # noqa: E402,F401\n"
        "from . import _views  # noqa: E402,F401\n",
    )
    assert layout.violations(layout.measure(package)) == []


def test_a_long_module_that_grows_or_a_new_one_fails(package: Path) -> None:
    clock = _file(package, "neotoma_agent._util.clock")
    padded = len(clock.read_text(encoding="utf-8").splitlines()) + 700
    _append(clock, "\n" * 700)
    # A module over the line that has a ceiling (none has today) may not grow past it.
    langgraph = package / "integrations" / "langgraph.py"
    grown = len(langgraph.read_text(encoding="utf-8").splitlines()) + 700
    _append(langgraph, "\n" * 700)
    ceilings = {
        **layout.CEILINGS,
        "long_modules": {"neotoma_agent.integrations.langgraph": grown - 1},
    }
    found = layout.violations(layout.measure(package), ceilings)
    assert found == [
        f"neotoma_agent._util.clock has {padded} lines (at most 700 lines): split it by concept "
        "into modules of at most 700 lines",
        f"neotoma_agent.integrations.langgraph has {grown} lines ({grown - 1} lines today): "
        "split it by concept into modules of at most 700 lines",
    ]


def test_a_new_private_module_at_the_package_root_fails(package: Path, today: Any) -> None:
    (package / "_new.py").write_text('"""A module put beside the drivers."""\n', encoding="utf-8")
    (package / "_engine" / "new.py").write_text('"""One in a package."""\n', encoding="utf-8")
    found = layout.violations(layout.measure(package))
    count = len(today.root_private_modules)
    assert found == [
        f"{count + 1} private modules at the package root (ceiling {count}): put a new "
        "module into the package of its concept (CONTRIBUTING's \"Where each concept "
        'lives"), not at the root'
    ]


def test_a_new_nonlocal_in_the_core_fails(package: Path, today: Any) -> None:
    before = today.counts()["core_nonlocal"]
    _append(
        _file(package, "neotoma_agent._util.clock"),
        "\n\ndef _count() -> None:\n    n = 0\n\n    def up() -> None:\n"
        "        nonlocal n\n        n += 1\n",
    )
    # a wing's closures are the wing's business
    _append(
        package / "cli" / "_main.py",
        "\n\ndef _count() -> None:\n    n = 0\n\n    def up() -> None:\n"
        "        nonlocal n\n        n += 1\n",
    )
    found = layout.violations(layout.measure(package))
    assert found == [
        f"the core has {before + 1} `nonlocal` statements (ceiling {before}): keep what "
        "closures share in a record of its own (an object whose attributes they set) instead"
    ]


def test_the_core_importing_a_wing_fails(package: Path) -> None:
    _append(
        _file(package, "neotoma_agent._util.clock"),
        "\n\ndef _cli() -> None:\n    from neotoma_agent.cli import _main  # noqa: F401\n",
    )
    found = layout.violations(layout.measure(package))
    assert (
        "the core module neotoma_agent._util.clock imports the wing neotoma_agent.cli._main: "
        "the core imports no wing"
    ) in found


def test_the_script_prints_the_table_and_json(
    capsys: pytest.CaptureFixture[str], today: Any
) -> None:
    assert layout.main(["--check"]) == 0
    table = capsys.readouterr().out
    assert f"| import cycles | {len(today.import_cycles)} | 0 |" in table
    assert "import cycles:\nmodules over 700 lines:\n" in table  # none to list
    assert layout.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"] == today.counts()
    assert data["targets"]["root_private_modules"] == 15


def test_check_exits_1_and_says_why(package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _append(
        _file(package, "neotoma_agent._util.clock"),
        "\nimport neotoma_agent._records.tools  # noqa: E402,F401\n",
    )
    assert layout.main(["--check", "--root", str(package)]) == 1
    assert (
        "layout: " + _cycle("neotoma_agent._util.clock", "neotoma_agent._records.tools")
        in capsys.readouterr().err
    )
