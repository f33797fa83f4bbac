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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the combinations that cannot exist: HttpTransport (aiohttp) under trio."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        impossible = params.get("anyio_backend") == "trio" and params.get("store") == "http"
        (drop if impossible else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
