"""Shared test set-up: the anyio backends, which backend x transport pairs exist, the
default run's time budget per test, and the skip summary.

This folder is on ``sys.path`` (pytest's "prepend" import mode, no ``__init__.py``), so the
support modules here (``cli_support``, ``turn_support``, ...) import by name from any
subfolder.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator

import pytest
from hypothesis import settings

# Property tests stay a few seconds by default; --hypothesis-profile=thorough searches longer.
settings.register_profile("fast", max_examples=300, deadline=None)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile("fast")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on both anyio backends."""
    return str(request.param)


#: anyio backends an HTTP transport cannot run on: aiohttp is asyncio-only.
_NOT_OVER_HTTP = frozenset({"trio"})


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Generate only the backend x transport combinations that exist.

    A test that takes both ``anyio_backend`` and a transport fixture parametrized over
    ``"embedded"`` and ``"http"`` (``store``, ``transport``) would get the cross product,
    with ``trio x http`` (aiohttp is asyncio-only) generated just to be skipped. Here the
    pairs are parametrized together instead: every backend with the embedded store, and
    HTTP on asyncio only. A test that parametrizes either name itself is left alone.

    A test marked ``one_backend`` runs on asyncio only: the backend cannot change what it
    checks (store semantics run on the store's own thread; pure data). Trio runs where the
    backend matters: the turn engine, cancellation, the store's thread bridge, reads.
    """
    names = set(metafunc.fixturenames)
    if "anyio_backend" not in names:
        return
    explicit = {
        name
        for mark in metafunc.definition.iter_markers("parametrize")
        for name in _argnames(mark.args[0])
    }
    if "anyio_backend" in explicit:
        return
    backends = _fixture_params(metafunc, "anyio_backend")
    if backends is not None and metafunc.definition.get_closest_marker("one_backend"):
        backends = ["asyncio"]
        metafunc.definition.add_marker(
            pytest.mark.parametrize("anyio_backend", backends, indirect=True)
        )
        return
    for name in sorted(names - explicit):
        kinds = _fixture_params(metafunc, name)
        if backends is None or kinds is None or "http" not in kinds:
            continue
        pairs = [
            pytest.param(backend, kind, id=f"{backend}-{kind}")
            for kind in kinds
            for backend in backends
            if not (kind == "http" and backend in _NOT_OVER_HTTP)
        ]
        metafunc.definition.add_marker(
            pytest.mark.parametrize(("anyio_backend", name), pairs, indirect=True)
        )
        return


def _argnames(spec: object) -> list[str]:
    if isinstance(spec, str):
        return [part.strip() for part in spec.split(",") if part.strip()]
    return [str(part) for part in spec]  # type: ignore[attr-defined]


def _fixture_params(metafunc: pytest.Metafunc, name: str) -> list[str] | None:
    """The params of the fixture ``name`` resolves to for this test, if it has any."""
    defs = metafunc._arg2fixturedefs.get(name, ())
    if not defs or defs[-1].params is None:
        return None
    return [str(p) for p in defs[-1].params]


# --- the default run's time budget -----------------------------------------------------------

#: Seconds a default-run test body may take (CI's 2 cores, the machine shared). A test over
#: it fails, saying so: make it faster, mark it ``slow`` (out of the default run) or give it
#: ``@pytest.mark.budget(SECONDS)`` with a comment saying why it needs that long.
DEFAULT_BUDGET = 15.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--test-budget",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help="fail a test whose body takes longer, unless marked slow, bench or budget(N) "
        f"(default {DEFAULT_BUDGET:g}; 0 turns the check off, e.g. on a loaded machine)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when != "call" or not report.passed:
        return report
    budget = _budget(item)
    load = _load_factor()
    if budget and call.duration > budget * load:
        scaled = f" (x{load:.1f} for this machine's load)" if load > 1 else ""
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {call.duration:.1f} s, over the default run's budget of "
            f"{budget:g} s a test{scaled}: make it faster, mark it @pytest.mark.slow (it "
            "then runs in `nox -s slow`), or raise its budget with "
            "@pytest.mark.budget(SECONDS) and say why; --test-budget=0 turns the check off"
        )
    return report


def _load_factor() -> float:
    """How many times slower than on an idle machine a test runs here, at least 1.

    The budget is for CI's idle 2 cores; on a shared machine (a developer's, 8 sessions
    at once) the same test takes proportionally longer, which is not the test's fault.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average (Windows)
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def _budget(item: pytest.Item) -> float:
    if item.get_closest_marker("slow") or item.get_closest_marker("bench"):
        return 0.0
    budget = float(item.config.getoption("--test-budget"))
    mark = item.get_closest_marker("budget")
    if mark is not None and budget:
        return max(budget, float(mark.args[0]))
    return budget


# --- the skip summary -------------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per skip reason, with how many tests it skipped (not one per test)."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section("skipped tests, by reason", sep="-")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        noun = "test" if count == 1 else "tests"
        terminalreporter.write_line(f"{count:>4} {noun}: {reason}")
