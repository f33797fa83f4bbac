"""Developer sessions; CI (`.ci/run`) runs the same commands."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

PATHS = ["neotoma_agent", "tests", "benchmarks", "examples", "scripts"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (both anyio backends, warnings as errors)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The slow tests only: the full cancellation sweep, random deadlines, long properties."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "slow", *session.posargs)


@nox.session
def integrations(session: nox.Session) -> None:
    """The framework integrations against their real packages (every framework extra):
    mypy --strict with the frameworks installed, then tests/integrations, slow ones too.

    Not in CI's default run: installing the frameworks adds minutes, not seconds (their
    tests skip there, saying so). Pydantic AI and LangChain need Python >= 3.11; the Claude
    Agent SDK's wheel bundles a 385 MB program.
    """
    session.install("-e", ".[test,dev,pydantic-ai,openai-agents,langchain,claude-agent-sdk]")
    session.run("mypy", "--strict", "neotoma_agent")
    session.run(
        "pytest",
        "tests/integrations",
        "tests/test_examples.py",
        "-m",
        "slow or not slow",
        *session.posargs,
    )


@nox.session
def hooks(session: nox.Session) -> None:
    """The coding-agent hooks against the real Claude Code program (claude-agent-sdk, 380 MB)."""
    session.install("-e", ".[test]", "claude-agent-sdk")
    session.run("pytest", "-m", "slow", "tests/hooks", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", *PATHS)
    session.run("ruff", "format", "--check", *PATHS)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test,dev]")
    session.run("mypy", "--strict", "neotoma_agent")


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks and write their figures under benchmarks/results/."""
    session.install("-e", ".[test]")
    session.run("mkdir", "-p", "benchmarks/results", external=True)
    benchmarks = ("embedded_store", "turn_protocol", "turn_overhead", "audit", "outbox")
    for name in (*benchmarks, "hook_latency"):
        session.run("python", f"benchmarks/{name}.py", "--json", f"benchmarks/results/{name}.json")


@nox.session
def browser(session: nox.Session) -> None:
    """The web view in headless Chromium (Debian's `chromium` package): every page, its
    links, the hostile corpus inert; NEOTOMA_UI_SCREENSHOTS=DIR keeps the screenshots."""
    session.install("-e", ".[test,ui]")
    session.run("pytest", "-m", "slow", "tests/ui/test_ui_browser.py", *session.posargs)
