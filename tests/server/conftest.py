"""Shared set-up of these tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """aiohttp (its server and its client) runs on asyncio only."""
    return "asyncio"
