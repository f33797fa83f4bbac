"""Developer sessions, and CI's: `.ci/run` calls these same sessions (`nox --no-venv`), so
each command is written here once.

``nox`` (no arguments) runs ``lint``, ``typecheck`` and ``tests``; CI runs ``lint``,
``typecheck``, ``docs`` and ``coverage`` (``tests`` under line coverage). The others: ``lowest``
(the suite on the lowest dependency versions pyproject.toml allows), ``slow`` (the long
sweeps), ``bench_smoke`` (the benchmarks at their smallest sizes, as tests) and ``bench``
(the benchmarks the measured-figures page quotes, re-run, and the page rendered from their
figures), ``docs`` (the documentation site, built with warnings as errors), ``integrations``
(the framework extras installed), ``hooks`` (the real Claude Code and Codex programs),
``browser`` (the web view in headless Chromium).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # nox itself depends on tomli below 3.11
    import tomli as tomllib

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

PATHS = ["neotoma_agent", "tests", "benchmarks", "examples", "scripts"]
PYPROJECT = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text("utf-8"))

#: What CI's test run adds: the 25 slowest tests, so a slow newcomer shows in every log.
DURATIONS = "--durations=25"
#: the default run on every core (pytest-xdist; `-n 0` in the arguments after `--` runs it in
#: one process, e.g. for --pdb); work stealing, since a few tests take seconds and most ms
PARALLEL = ("-n", "auto", "--dist", "worksteal")


def dev_pin(name: str) -> str:
    """The exact requirement the ``dev`` extra pins for ``name`` (its one place)."""
    for spec in PYPROJECT["project"]["optional-dependencies"]["dev"]:
        if Requirement(spec).name == name:
            return str(spec)
    raise LookupError(f"the dev extra has no {name}")


def lowest_constraints() -> list[str]:
    """``name==floor`` for every direct dependency (core and ``test`` extra).

    The same as ``uv pip install --resolution lowest-direct``: each direct dependency at
    the lowest version its ``>=`` allows, what it needs resolved as usual. A dependency
    without a floor is an error here: a floor is a promise CI keeps.
    """
    project = PYPROJECT["project"]
    pins = []
    for spec in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        requirement = Requirement(spec)
        floors = [s.version for s in requirement.specifier if s.operator == ">="]
        if len(floors) != 1:
            raise ValueError(f"{spec!r}: every dependency needs one >= floor")
        # A dependency of some Pythons only (its marker) is pinned on those only.
        marker = f"; {requirement.marker}" if requirement.marker else ""
        pins.append(f"{requirement.name}=={floors[0]}{marker}")
    return pins


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check (the ruff the dev extra pins)."""
    session.install(dev_pin("ruff"))
    session.run("ruff", "check", *PATHS)
    session.run("ruff", "format", "--check", *PATHS)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package (the mypy the dev extra pins)."""
    session.install("-e", ".[test,dev]")
    session.run("mypy", "--strict", "neotoma_agent")


@nox.session
def tests(session: nox.Session) -> None:
    """The default run: both anyio backends, warnings as errors, the slowest tests listed.

    Arguments after ``--`` go to pytest (``nox -s tests -- tests/turns/test_turn.py -x``).
    """
    session.install("-e", ".[test]")
    session.run("pytest", DURATIONS, *PARALLEL, *session.posargs)


@nox.session
def coverage(session: nox.Session) -> None:
    """The default run under line coverage (what CI runs): ``tests``, then one figure per
    module of ``neotoma_agent`` and the total. Costs about a third more CPU than ``tests``.
    """
    session.install("-e", ".[test]", dev_pin("coverage"))
    session.run("coverage", "erase")
    session.run("coverage", "run", "-m", "pytest", DURATIONS, *PARALLEL, *session.posargs)
    session.run("coverage", "combine", "--quiet")
    session.run("coverage", "report")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs.yml) with warnings as errors, as CI does: a
    broken link, a missing anchor, an unresolved docstring or a snippet that names nothing
    fails the build. The site goes to a temporary folder (``mkdocs serve`` to read it).
    """
    session.install("-e", ".[docs]")
    site = Path(session.create_tmp()) / "site"
    # mkdocs-material prints a banner about MkDocs 2.0 on every build unless told not to.
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"}
    )


@nox.session
def lowest(session: nox.Session) -> None:
    """The default run with every direct dependency at the lowest version allowed."""
    constraints = Path(session.create_tmp()) / "lowest.txt"
    constraints.write_text("\n".join(lowest_constraints()) + "\n", encoding="utf-8")
    session.install("-c", str(constraints), "-e", ".[test]")
    session.run("python", "-m", "pip", "list", "--format=freeze", silent=False)
    session.run("pytest", DURATIONS, *PARALLEL, *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The slow tests only: the full cancellation sweep, random deadlines, long properties,
    and each format step's comparison with more examples than the default run gives it."""
    session.install("-e", ".[test]")
    session.run(
        "pytest",
        "-m",
        "slow or format_comparison",
        *session.posargs,
        env={"NEOTOMA_COMPARED_EXAMPLES": "25"},
    )


@nox.session
def bench_smoke(session: nox.Session) -> None:
    """Every benchmark at its smallest size, checking what it counts (pytest -m bench)."""
    session.install("-e", ".[test,bench]")
    session.run("pytest", "-m", "bench", *session.posargs)


#: the benchmarks docs/performance.md quotes: benchmarks/results/NAME.json, and its command
QUOTED = {
    "peers": ["benchmarks/peers.py"],
    "peers_full": ["benchmarks/peers.py", "--full"],
    "peers_profile": ["benchmarks/peers.py", "--profile"],
    "disk_layout_probe": ["benchmarks/disk_layout_probe.py", "--write-turns", "1000"],
    "disk_per_turn": ["benchmarks/disk_per_turn.py", "--turns", "1000", "10000"],
    "sqlite_floor": ["benchmarks/sqlite_floor.py", "--stores", "2000", "--turns", "2000"],
    "embedded_store": ["benchmarks/embedded_store.py"],
}
#: more benchmarks that write their figures, run when named (``nox -s bench -- outbox``)
UNQUOTED = {
    name: [f"benchmarks/{name}.py"]
    for name in ("turn_protocol", "turn_overhead", "audit", "outbox", "search", "turn_instructions")
}


@nox.session
def bench(session: nox.Session) -> None:
    """Re-run the benchmarks docs/performance.md quotes, write their figures to
    benchmarks/results/, and render the page's tables from them.

    Each runs under ``nice`` (the machine may be shared: the figures' metadata says so).
    ``nox -s bench -- peers peers_profile`` runs only those; then commit the JSON and the
    page together (``tests/test_performance_doc.py`` fails when they disagree).
    """
    session.install("-e", ".[test,bench]")
    commands = {**QUOTED, **UNQUOTED}
    for name in session.posargs or list(QUOTED):
        out = f"benchmarks/results/{name}.json"
        session.run("nice", "-n", "10", "python", *commands[name], "--json", out, external=True)
    session.run("python", "scripts/performance_doc.py")


@nox.session
def integrations(session: nox.Session) -> None:
    """The framework integrations against their real packages (every framework extra):
    mypy --strict with the frameworks installed, then tests/integrations, slow ones too.

    CI's run installs the same extras, so their offline tests run there too; this session
    adds the slow ones (the real ``claude`` program, a LangGraph resume in another process)
    and the durable checkpointer. Pydantic AI and LangChain need Python >= 3.11; the Claude
    Agent SDK's wheel bundles a 385 MB program.
    """
    session.install(
        "-e",
        ".[test,dev,pydantic-ai,openai-agents,langchain,claude-agent-sdk]",
        # a durable checkpointer, for a LangGraph turn resumed in another process
        "langgraph-checkpoint-sqlite",
    )
    session.run("mypy", "--strict", "neotoma_agent")
    session.run(
        "pytest",
        "tests/integrations",
        "tests/test_examples.py",
        "-m",
        "slow or not slow",
        *session.posargs,
    )


#: the Codex release the hooks' fixtures were recorded from (tests/data/hooks/codex)
CODEX = "@openai/codex@0.171.0"


@nox.session
def hooks(session: nox.Session) -> None:
    """The coding-agent hooks against the real Claude Code program (claude-agent-sdk, 380 MB)
    and the real Codex program (npm's @openai/codex, a native binary, 100 MB)."""
    session.install("-e", ".[test]", "claude-agent-sdk")
    env = {}
    if shutil.which("npm"):
        prefix = Path(session.create_tmp()) / "codex"
        session.run("npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                    CODEX, external=True, silent=True)  # fmt: skip
        native = sorted(prefix.glob("node_modules/@openai/codex-*/vendor/*/bin/codex"))
        if native:
            env["CODEX_PROGRAM"] = str(native[0])
    session.run("pytest", "-m", "slow", "tests/hooks", *session.posargs, env=env)


@nox.session
def browser(session: nox.Session) -> None:
    """The web view in headless Chromium (Debian's `chromium` package): every page, its
    links, the hostile corpus inert; NEOTOMA_UI_SCREENSHOTS=DIR keeps the screenshots."""
    session.install("-e", ".[test,ui]")
    session.run("pytest", "-m", "slow", "tests/ui/test_ui_browser.py", *session.posargs)
