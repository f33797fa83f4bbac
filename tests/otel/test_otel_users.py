"""A user id (``store.for_user``) is personal data: it never reaches a log or a span, unless
the application turned content capture on, when the turn span carries it as ``user.id``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import structlog
from otel_support import Telemetry
from turn_support import capture_logs

from neotoma_agent import EmbeddedStore, NeotomaMemory, ValidationError

pytestmark = pytest.mark.anyio

USER = "maria.gomez@example.test"


async def _turns(path: Path) -> None:
    async with EmbeddedStore.open(path) as store:
        view = store.for_user(USER)
        memory = NeotomaMemory(view, conversation_id="c")
        async with memory.turn("Do you know Acme Corp?") as t:
            t.record_tool("lookup", args={"q": "Acme"}, result="none")
            t.remember("company", name="Acme Corp")
            t.reply = "No."
        with pytest.raises(ValidationError):  # a refused store: its error is logged nowhere
            await view.store(
                [{"entity_type": "x", "target_id": "ent_" + "0" * 24}], idempotency_key="k"
            )
        with pytest.raises(RuntimeError):
            async with memory.turn("and Globex?") as t:
                raise RuntimeError("the model failed")


async def test_a_user_id_is_in_no_log_and_no_span(
    tmp_path: Path, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="neotoma_agent")
    try:
        with capture_logs() as logs:
            await _turns(tmp_path / "memory.db")
    finally:
        structlog.reset_defaults()
    spans = telemetry.finished()
    assert spans
    text = repr(logs) + caplog.text + repr([s.to_json() for s in spans])
    assert USER not in text
    assert "maria" not in text


async def test_with_content_capture_the_turn_span_names_the_user(
    tmp_path: Path, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await _turns(tmp_path / "memory.db")
    turns = telemetry.named("turn")
    assert [s.attributes.get("user.id") for s in turns] == [USER, USER]
