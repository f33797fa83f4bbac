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


@nox.session(python=["3.11", "3.12"])
def integrations(session: nox.Session) -> None:
    """The framework integrations with their extras installed (CI runs without them).

    tests/integrations/ skips each framework's tests, saying so, when its extra is absent;
    this session installs both (LangChain needs Python >= 3.11; the Claude Agent SDK's wheel
    bundles a 385 MB program) and runs them, the slow ones too.
    """
    session.install("-e", ".[test,langchain,claude-agent-sdk]")
    session.run("pytest", "tests/integrations", "-m", "slow or not slow", *session.posargs)


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
    for name in ("embedded_store", "turn_protocol", "turn_overhead", "audit", "outbox"):
        session.run("python", f"benchmarks/{name}.py", "--json", f"benchmarks/results/{name}.json")
