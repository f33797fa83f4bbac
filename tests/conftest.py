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


_NO_TRIO_HTTP = pytest.mark.skip(
    reason="HttpTransport runs on aiohttp, which is asyncio-only: trio runs the embedded store"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, saying why, the combinations that cannot exist: HttpTransport under trio."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if params.get("anyio_backend") == "trio" and params.get("store") == "http":
            item.add_marker(_NO_TRIO_HTTP)
