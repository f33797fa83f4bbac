"""The keywords of ``Transport.store`` and ``recent_conversation``, each stated once (a
TypedDict taken as ``**options: Unpack[...]``), behave as a signature.

A keyword none of them names, or a store without its idempotency key, must still raise
:class:`TypeError` before any request (as an explicit signature did), whichever transport or
wrapper the call goes through; a wrapper passes the defaults on as it does every other
method's; mypy still checks implementations and calls against the protocol.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from neotoma_agent import (
    ConversationReader,
    EmbeddedStore,
    HttpTransport,
    NotFoundError,
    OutboxTransport,
    Transport,
)
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._bodies import (
    STORE_DEFAULTS,
    WINDOW_DEFAULTS,
    ConversationWindow,
    StoreOptions,
)
from neotoma_agent.transport.rest import store_body

pytestmark = pytest.mark.anyio

ENTITY = {"entity_type": "company", "name": "Acme Corp"}

Open = Callable[[Path], Awaitable[Transport]]


async def _embedded(tmp_path: Path) -> Transport:
    return EmbeddedStore.open(":memory:")


async def _outbox(tmp_path: Path) -> Transport:
    return OutboxTransport(EmbeddedStore.open(":memory:"), tmp_path / "o.db")


async def _recording(tmp_path: Path) -> Transport:
    return RecordingTransport(EmbeddedStore.open(":memory:"))


async def _http(tmp_path: Path) -> Transport:
    # Port 1 on the loopback: nothing listens, so a request would fail as ConnectionLost.
    return HttpTransport("http://127.0.0.1:1")


TRANSPORTS: dict[str, Open] = {
    "embedded": _embedded,
    "outbox": _outbox,
    "recording": _recording,
    "http": _http,
}


@pytest.fixture(params=sorted(TRANSPORTS))
async def transport(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Transport]:
    if request.param == "http" and anyio_backend != "asyncio":
        pytest.skip("aiohttp runs on asyncio only")
    opened = await TRANSPORTS[request.param](tmp_path)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_keyword_store_does_not_take_raises_type_error(transport: Transport) -> None:
    store: Any = transport.store  # the misspelling is the point: mypy refuses it too
    with pytest.raises(TypeError, match="unexpected keyword argument 'stirct'"):
        await store([ENTITY], idempotency_key="k", stirct=True)


async def test_a_store_without_its_key_raises_type_error(transport: Transport) -> None:
    store: Any = transport.store
    with pytest.raises(TypeError, match="idempotency_key"):
        await store([ENTITY], relationships=())


async def test_a_keyword_a_conversation_read_does_not_take_raises_type_error(
    transport: Transport,
) -> None:
    assert isinstance(transport, ConversationReader)
    read: Any = transport.recent_conversation
    with pytest.raises(TypeError, match="unexpected keyword argument 'limt'"):
        await read("ent_0123456789abcdef01234567", limt=5)


async def test_a_wrapper_passes_every_default_on() -> None:
    async with RecordingTransport(EmbeddedStore.open(":memory:")) as recorded:
        stored = await recorded.store([ENTITY], idempotency_key="k1", strict=True)
        with pytest.raises(NotFoundError):
            await recorded.recent_conversation(stored.entities[0].entity_id, limit=3)
    [store] = recorded.calls_to("store")
    assert store.kwargs == {**STORE_DEFAULTS, "idempotency_key": "k1", "strict": True}
    [read] = recorded.calls_to("recent_conversation")
    assert read.kwargs == {"limit": 3, "before": None}


def test_the_defaults_name_every_optional_keyword() -> None:
    assert set(STORE_DEFAULTS) == set(StoreOptions.__annotations__) - {"idempotency_key"}
    assert set(WINDOW_DEFAULTS) == set(ConversationWindow.__annotations__)


def test_the_body_leaves_the_hints_out() -> None:
    body = store_body([ENTITY], idempotency_key="k", lane="chat-1", deferrable=True)
    assert body == {"entities": [ENTITY], "idempotency_key": "k"}


MYPY_CASE = """
from collections.abc import Mapping, Sequence
from typing import Any

from neotoma_agent import EmbeddedStore, StoreResult, Transport


class Explicit(EmbeddedStore):  # a user's store, its signature spelled out
    async def store(
        self,
        entities: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        relationships: Sequence[Mapping[str, Any]] = (),
        source_priority: int | None = None,
        observation_source: str | None = None,
        strict: bool = False,
        lane: str | None = None,
        deferrable: bool = False,
    ) -> StoreResult:
        raise NotImplementedError


class NoHints(EmbeddedStore):  # forgets the hints: not a Transport's store
    async def store(  # E: incompatible with the protocol's
        self, entities: Sequence[Mapping[str, Any]], *, idempotency_key: str
    ) -> StoreResult:
        raise NotImplementedError


async def use(t: Transport, store: EmbeddedStore) -> None:
    await t.store([], idempotency_key="k", strict=True, lane="c", deferrable=True)
    await store.store([], idempotency_key="k", source_priority=100)
    await t.store([], idempotency_key="k", stirct=True)  # E: unexpected keyword
    await store.store([], strict=True)  # E: missing idempotency_key
    await store.store([], idempotency_key="k", strict="yes")  # E: a str for a bool
    await t.store([], idempotency_key="k", lane=None, deferrable=False)
    await store.recent_conversation("ent_x", limit=5, before="ent_y")
    await store.recent_conversation("ent_x", limt=5)  # E: unexpected keyword


def as_transport(explicit: Explicit) -> Transport:
    return explicit
"""


@pytest.mark.slow
def test_mypy_checks_implementations_and_calls_against_the_protocol(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    case = tmp_path / "case.py"
    case.write_text(textwrap.dedent(MYPY_CASE), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(case)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    errors = {int(line.split(":")[1]) for line in done.stdout.splitlines() if ": error:" in line}
    expected = {n for n, line in enumerate(MYPY_CASE.splitlines(), 1) if "# E:" in line}
    assert errors == expected, done.stdout
