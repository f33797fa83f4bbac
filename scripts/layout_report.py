"""Count the package's layout from its code: cycles, private modules, long modules, wing imports.

    python scripts/layout_report.py [--json] [--check] [--root PACKAGE_DIR]

Reads every ``.py`` file under ``neotoma_agent/`` with :mod:`ast` (nothing is imported) and
prints today's figures beside issue 40's targets:

- **import cycles** among the package's modules. Every import statement counts, wherever it
  stands (module level, inside a function, under ``if TYPE_CHECKING:``): a function-level or
  type-only import still ties the two modules together. ``from P import N`` is an edge to the
  module ``P.N`` when there is one, else to ``P``. Package ``__init__`` modules are left out of
  the graph: they are facades (the root's names are imported lazily, on first use), and every
  module importing the public API would otherwise close a loop through them. A cycle is a
  strongly connected component of two or more modules, or a module importing itself.
- **private modules at the package root**: ``neotoma_agent/_*.py`` (not ``__init__``,
  ``__main__``).
- **modules over 700 lines** (lines as ``wc -l`` counts them).
- **``nonlocal`` statements in the core**: the package minus its wings (``WINGS``).
- **wing → private core imports**: per wing, the distinct (module of the wing, private module
  of the core) pairs; a private module is one with a ``_``-prefixed part in its dotted name.
  A wing importing its own private modules is not counted. The wings of ``DOORS`` keep
  theirs in one module, ``<wing>/_core.py``: an import of a private core module from any
  other of their modules is a violation, whatever the ceiling.
- **wing → other wing private imports**: per wing, the distinct (module of the wing, private
  module of another wing) pairs (``ui`` importing ``server._guard``): a wing uses another
  wing through its public names, as a user would. The entry points (``ENTRY_POINTS``)
  belong to no wing and are not counted.

``tests/test_layout.py`` runs :func:`measure` and holds the line against the ceilings in
``CEILINGS`` (:func:`violations`; ``--check`` prints them and exits 1 when there are any):
lower one when the code gets better; never raise one.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

PACKAGE = "neotoma_agent"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: The wings: they use the core's public API; everything else in the package is the core.
WINGS = ("cli", "qa", "hooks", "server", "ui", "integrations", "sync")

#: The wings whose private core imports all go through one module of their own,
#: ``<wing>/_core.py`` (each import named, with its reason, in CONTRIBUTING's paragraph
#: "Private imports a wing keeps"): a private import anywhere else in them fails.
DOORS = ("cli", "qa", "hooks")

#: Entry points that start a wing (``python -m neotoma_agent`` runs the command line).
ENTRY_POINTS = (f"{PACKAGE}.__main__",)

#: Longest a module may be.
MAX_LINES = 700

#: Issue 40's targets ("what done looks like").
TARGETS: Mapping[str, int] = {
    "import_cycles": 0,
    "root_private_modules": 15,
    "modules_over_max_lines": 0,
    "core_nonlocal": 4,
    "wing_private_imports": 5,
    "core_wing_imports": 0,
    "wing_cross_imports": 0,
}

#: The ratchet tests/test_layout.py holds: today's figures. Lower a ceiling when the code
#: gets better (and say so in the commit); never raise one.
CEILINGS: Mapping[str, object] = {
    # the import cycles there are today, each as its sorted modules
    "import_cycles": [],
    # the modules over MAX_LINES today, with their length: none may grow, none may join
    "long_modules": {},
    # the private modules at the package root today: a new module goes into the package of
    # its concept (CONTRIBUTING's "Where each concept lives"), not beside the drivers
    "root_private_modules": 10,
    # the `nonlocal` statements in the core today (closures that assign state belong in a
    # record of their own, as the turn machine's steps keep theirs)
    "core_nonlocal": 2,
    # per wing, the (wing module, private core module) pairs today
    "wing_private_imports": {
        "cli": 2,
        "hooks": 1,
        "integrations": 0,
        "qa": 1,
        "server": 0,
        "sync": 0,
        "ui": 0,
    },
    # per wing, the (wing module, another wing's private module) pairs today: none, the
    # cli (each wing's command front-end) included: what a command needs of a wing is
    # public there
    "wing_cross_imports": {
        "cli": 0,
        "hooks": 0,
        "integrations": 0,
        "qa": 0,
        "server": 0,
        "sync": 0,
        "ui": 0,
    },
}


@dataclass(frozen=True)
class Module:
    """One module of the package: its dotted name, its file and what it imports."""

    name: str
    path: Path
    lines: int
    imports: frozenset[str]
    nonlocal_count: int

    @property
    def is_package(self) -> bool:
        """Whether this is a package's ``__init__``."""
        return self.path.name == "__init__.py"

    @property
    def wing(self) -> str | None:
        """The wing this module belongs to, or None for the core."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


@dataclass
class Report:
    """The figures, as ``--json`` prints them."""

    modules: int
    lines: int
    import_cycles: list[list[str]]
    root_private_modules: list[str]
    long_modules: dict[str, int]
    core_nonlocal: dict[str, int]
    wing_private_imports: dict[str, list[list[str]]] = field(default_factory=dict)
    core_wing_imports: list[list[str]] = field(default_factory=list)
    wing_cross_imports: dict[str, list[list[str]]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """One number per figure, the issue's targets' keys."""
        return {
            "import_cycles": len(self.import_cycles),
            "root_private_modules": len(self.root_private_modules),
            "modules_over_max_lines": len(self.long_modules),
            "core_nonlocal": sum(self.core_nonlocal.values()),
            "wing_private_imports": sum(len(v) for v in self.wing_private_imports.values()),
            "core_wing_imports": len(self.core_wing_imports),
            "wing_cross_imports": sum(len(v) for v in self.wing_cross_imports.values()),
        }


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` under the package directory ``root``."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class _Parsed:
    """What the report needs of one file's text: its imports and its ``nonlocal`` count."""

    # (level, module, names) of each ``from ... import``; level -1 for a plain ``import``
    imports: tuple[tuple[int, str, tuple[str, ...]], ...]
    nonlocal_count: int


_PARSED: dict[str, _Parsed] = {}


def _parse(text: str, filename: str) -> _Parsed:
    """One walk of a file's tree, kept by text: the tests re-measure copies of the package
    with one file changed, and only that file is parsed again."""
    if (known := _PARSED.get(text)) is not None:
        return known
    imports: list[tuple[int, str, tuple[str, ...]]] = []
    nonlocals = 0
    for node in ast.walk(ast.parse(text, filename=filename)):
        if isinstance(node, ast.Import):
            imports.append((-1, "", tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Nonlocal):
            nonlocals += 1
    parsed = _PARSED[text] = _Parsed(tuple(imports), nonlocals)
    return parsed


def _resolve(level: int, module: str, here: str, is_package: bool) -> str:
    """The absolute name ``from ... import`` starts from."""
    if level == 0:
        return module
    base = here.split(".")
    # a package's __init__ is its own package; a module's package is its parent
    drop = level - 1 if is_package else level
    base = base[: len(base) - drop] if drop else base
    return ".".join([*base, module] if module else base)


def _targets(parsed: _Parsed, here: str, is_package: bool, known: set[str]) -> set[str]:
    """The package modules a module's import statements name."""
    found: set[str] = set()
    for level, module, aliases in parsed.imports:
        if level < 0:
            names = list(aliases)
        else:
            start = _resolve(level, module, here, is_package)
            names = [f"{start}.{a}" if f"{start}.{a}" in known else start for a in aliases]
        for name in names:
            # `import a.b.c` names the deepest module of the package it reaches
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.split(".")[0] == PACKAGE and name != here:
                found.add(name)
            elif name == here:
                found.add(here)
    return found


def load(root: Path = ROOT) -> dict[str, Module]:
    """Every module under ``root``, parsed."""
    paths = sorted(root.rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        parsed = _parse(text, str(path))
        name = module_name(path, root)
        modules[name] = Module(
            name=name,
            path=path,
            lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            imports=frozenset(_targets(parsed, name, path.name == "__init__.py", known)),
            nonlocal_count=parsed.nonlocal_count,
        )
    return modules


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of two or more nodes, and self-loops (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative, so a deep chain of imports cannot hit the recursion limit
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def is_private(name: str) -> bool:
    """Whether a dotted module name has a ``_``-prefixed part (``__init__`` aside)."""
    return any(part.startswith("_") for part in name.split(".")[1:])


def measure(root: Path = ROOT) -> Report:
    """Count the figures for the package at ``root``."""
    modules = load(root)
    graph = {
        m.name: {t for t in m.imports if not modules[t].is_package}
        for m in modules.values()
        if not m.is_package
    }
    wing_imports: dict[str, list[list[str]]] = {wing: [] for wing in WINGS}
    cross_imports: dict[str, list[list[str]]] = {wing: [] for wing in WINGS}
    core_wing: list[list[str]] = []
    for m in modules.values():
        if m.wing is None and m.name not in ENTRY_POINTS:
            core_wing.extend([m.name, t] for t in sorted(m.imports) if modules[t].wing)
            continue
        for target in sorted(m.imports):
            if not is_private(target):
                continue
            if modules[target].wing is None:
                wing_imports[m.wing].append([m.name, target])
            elif m.wing is not None and modules[target].wing != m.wing:
                cross_imports[m.wing].append([m.name, target])
    root_private = sorted(
        m.name
        for m in modules.values()
        if m.path.parent == root
        and m.path.stem.startswith("_")
        and not m.path.stem.startswith("__")
    )
    return Report(
        modules=len(modules),
        lines=sum(m.lines for m in modules.values()),
        import_cycles=cycles(graph),
        root_private_modules=root_private,
        long_modules={
            m.name: m.lines
            for m in sorted(modules.values(), key=lambda m: m.name)
            if m.lines > MAX_LINES
        },
        core_nonlocal={
            m.name: m.nonlocal_count
            for m in modules.values()
            if m.wing is None and m.nonlocal_count
        },
        wing_private_imports=dict(sorted(wing_imports.items())),
        core_wing_imports=sorted(core_wing),
        wing_cross_imports=dict(sorted(cross_imports.items())),
    )


def violations(report: Report, ceilings: Mapping[str, object] = CEILINGS) -> list[str]:
    """What ``report`` does worse than ``ceilings``, one sentence each (empty: the line holds)."""
    found: list[str] = []
    known_cycles = ceilings["import_cycles"]
    assert isinstance(known_cycles, list)
    for cycle in report.import_cycles:
        if cycle not in known_cycles:
            found.append(
                f"new import cycle {' <-> '.join(cycle)}: move what they share into a module "
                "of its own that imports none of them, or pass it in as an argument; "
                "an import inside a function or under TYPE_CHECKING is still a cycle"
            )
    long_ceilings = ceilings["long_modules"]
    assert isinstance(long_ceilings, Mapping)
    for name, lines in report.long_modules.items():
        ceiling = long_ceilings.get(name)
        if ceiling is None or lines > ceiling:
            allowed = f"{ceiling} lines today" if ceiling else f"at most {MAX_LINES} lines"
            found.append(
                f"{name} has {lines} lines ({allowed}): split it by concept into modules "
                f"of at most {MAX_LINES} lines"
            )
    per_wing_figures = (
        (
            "wing_private_imports",
            "private core modules",
            "use the public API (neotoma_agent, its public modules), or add what the wing "
            "needs to the public API, documented and tested",
        ),
        (
            "wing_cross_imports",
            "private modules of other wings",
            "use the other wing's public names (its package's __all__), or add what is "
            "needed there, documented",
        ),
    )
    for figure, what, advice in per_wing_figures:
        figure_ceilings = ceilings[figure]
        assert isinstance(figure_ceilings, Mapping)
        for wing, pairs in getattr(report, figure).items():
            ceiling = figure_ceilings.get(wing, 0)
            if len(pairs) > ceiling:
                found.append(
                    f"the {wing} wing imports {what} {len(pairs)} times (ceiling {ceiling}): "
                    f"{advice}; do not raise the ceiling in scripts/layout_report.py"
                )
    for wing in DOORS:
        door = f"{PACKAGE}.{wing}._core"
        for src, dst in report.wing_private_imports.get(wing, []):
            if src != door:
                found.append(
                    f"{src} imports the private core module {dst} outside {wing}/_core.py: "
                    "use the public API (neotoma_agent, neotoma_agent.reads, its public "
                    f"modules); a name the {wing} wing genuinely needs privately goes "
                    f"through {wing}/_core.py, named with its reason in CONTRIBUTING"
                )
    root_ceiling = ceilings["root_private_modules"]
    assert isinstance(root_ceiling, int)
    if len(report.root_private_modules) > root_ceiling:
        found.append(
            f"{len(report.root_private_modules)} private modules at the package root "
            f"(ceiling {root_ceiling}): put a new module into the package of its concept "
            '(CONTRIBUTING\'s "Where each concept lives"), not at the root'
        )
    nonlocal_ceiling = ceilings["core_nonlocal"]
    assert isinstance(nonlocal_ceiling, int)
    nonlocal_count = report.counts()["core_nonlocal"]
    if nonlocal_count > nonlocal_ceiling:
        found.append(
            f"the core has {nonlocal_count} `nonlocal` statements (ceiling {nonlocal_ceiling}): "
            "keep what closures share in a record of its own (an object whose attributes "
            "they set) instead"
        )
    for src, dst in report.core_wing_imports:
        found.append(f"the core module {src} imports the wing {dst}: the core imports no wing")
    return found


def render(report: Report) -> str:
    """The table ``layout_report.py`` prints, then the lists behind its numbers."""
    counts = report.counts()
    labels = {
        "import_cycles": "import cycles",
        "root_private_modules": "private modules at the package root",
        "modules_over_max_lines": f"modules over {MAX_LINES} lines",
        "core_nonlocal": "`nonlocal` statements in the core",
        "wing_private_imports": "wing -> private core imports",
        "core_wing_imports": "core -> wing imports",
        "wing_cross_imports": "wing -> other wing private imports",
    }
    rows = [(label, counts[key], TARGETS[key]) for key, label in labels.items()]
    out = [
        f"{report.modules} modules, {report.lines} lines",
        "",
        "| figure | today | target |",
        "| --- | ---: | ---: |",
        *(
            f"| {label} | {today} | {'<= ' if target else ''}{target} |"
            for label, today, target in rows
        ),
        "",
        "import cycles:",
        *(f"  {' <-> '.join(c)}" for c in report.import_cycles),
        f"modules over {MAX_LINES} lines:",
        *(f"  {name} {lines}" for name, lines in report.long_modules.items()),
        "`nonlocal` in the core:",
        *(f"  {name} {n}" for name, n in sorted(report.core_nonlocal.items())),
        "core -> wing imports:",
        *(f"  {src} -> {dst}" for src, dst in report.core_wing_imports),
        "wing -> private core imports:",
    ]
    for wing, pairs in report.wing_private_imports.items():
        out.append(f"  {wing} {len(pairs)}")
        out.extend(f"    {src} -> {dst}" for src, dst in pairs)
    out.append("wing -> other wing private imports:")
    for wing, pairs in report.wing_cross_imports.items():
        out.append(f"  {wing} {len(pairs)}")
        out.extend(f"    {src} -> {dst}" for src, dst in pairs)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the table (or ``--json``); with ``--check``, exit status 1 past a ceiling."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--check", action="store_true", help="exit 1, saying why, when a figure passes its ceiling"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the package directory")
    args = parser.parse_args(argv)
    report = measure(args.root)
    if args.json:
        print(
            json.dumps({"counts": report.counts(), "targets": TARGETS, **asdict(report)}, indent=2)
        )
    else:
        print(render(report))
    if args.check:
        found = violations(report)
        for line in found:
            print(f"layout: {line}", file=sys.stderr)
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
