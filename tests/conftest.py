from __future__ import annotations

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
