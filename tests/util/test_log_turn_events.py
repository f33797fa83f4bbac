"""A turn's log events cost nothing when nothing takes them, and carry the turn's ids when
something does: its INFO events are not even built while the ``neotoma_agent`` logger is
below INFO and structlog is not configured; shown, they carry ``conversation_id`` and
``turn_id``; and a turn binds them through structlog only when the application configured
structlog (merely imported, structlog's context is left alone)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from turn_support import capture_logs

from neotoma_agent import EmbeddedStore, NeotomaMemory
from neotoma_agent.log import LOGGER_NAME, EventLogger, get_logger

anyio = pytest.mark.anyio

#: the INFO events of a completed turn with a history read
TURN_EVENTS = {"turn.opened", "history.done", "retrieval.done", "turn.closed"}


@pytest.fixture
def unconfigured() -> Iterator[None]:
    """structlog imported but not configured (an earlier test may have configured it)."""
    old = structlog.get_config() if structlog.is_configured() else None
    structlog.reset_defaults()
    try:
        yield
    finally:
        if old is not None:
            structlog.configure(**old)


async def two_turns(path: Path, seen: list[dict[str, Any]] | None = None) -> None:
    async with EmbeddedStore.open(path) as store:
        memory = NeotomaMemory(store, conversation_id="chat-7")
        for turn_id in ("t1", "t2"):
            async with memory.turn("How is the plan going?", turn_id=turn_id) as t:
                if seen is not None:
                    seen.append(dict(structlog.contextvars.get_contextvars()))
                t.reply = "Fine."


@anyio
async def test_a_turn_builds_no_info_event_nothing_would_take(
    tmp_path: Path, unconfigured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging.getLogger(LOGGER_NAME), "level", logging.WARNING)
    built: list[str] = []
    # A spy on the library's own INFO entry: every event a turn builds passes through it.
    monkeypatch.setattr(EventLogger, "info", lambda self, event, **fields: built.append(event))
    assert not get_logger().enabled()
    await two_turns(tmp_path / "m.db")
    assert built == []


@anyio
async def test_shown_the_turn_events_carry_the_turn_s_ids(
    tmp_path: Path, unconfigured: None, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, Any]] = []
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        assert get_logger().enabled()
        await two_turns(tmp_path / "m.db", seen)
    events = [r for r in caplog.records if getattr(r, "neotoma_event", None) in TURN_EVENTS]
    assert {r.neotoma_event for r in events} == TURN_EVENTS  # type: ignore[attr-defined]
    ids = [(r.neotoma_fields["conversation_id"], r.neotoma_fields["turn_id"]) for r in events]  # type: ignore[attr-defined]
    assert set(ids) == {("chat-7", "t1"), ("chat-7", "t2")}
    closed = [r.neotoma_fields for r in events if r.neotoma_event == "turn.closed"]  # type: ignore[attr-defined]
    assert [c["reply_chars"] for c in closed] == [5, 5]
    # structlog is imported but not configured: its context is not where the ids went.
    assert seen == [{}, {}]


@anyio
async def test_a_configured_structlog_sees_the_turn_s_ids_in_its_context(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []
    with capture_logs() as logs:
        await two_turns(tmp_path / "m.db", seen)
    assert seen == [
        {"conversation_id": "chat-7", "turn_id": "t1"},
        {"conversation_id": "chat-7", "turn_id": "t2"},
    ]
    closed = [e for e in logs if e["event"] == "turn.closed"]
    assert [(e["conversation_id"], e["turn_id"]) for e in closed] == [
        ("chat-7", "t1"),
        ("chat-7", "t2"),
    ]
    assert not structlog.contextvars.get_contextvars()  # unbound after each turn


@anyio
async def test_a_filtering_structlog_above_info_gets_no_event_built_and_still_the_ids(
    tmp_path: Path, unconfigured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An application that configured structlog to drop INFO: the turn's INFO events are not
    # built (they would be dropped), but its ids are bound for the application's own events.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    built: list[str] = []
    monkeypatch.setattr(EventLogger, "info", lambda self, event, **fields: built.append(event))
    assert not get_logger().enabled()
    assert get_logger().enabled(logging.WARNING)
    seen: list[dict[str, Any]] = []
    await two_turns(tmp_path / "m.db", seen)
    assert built == []
    assert [s["turn_id"] for s in seen] == ["t1", "t2"]


def test_a_standard_library_structlog_follows_its_logger_s_level(unconfigured: None) -> None:
    structlog.configure(
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
    )
    std = logging.getLogger(LOGGER_NAME)
    level = std.level
    try:
        std.setLevel(logging.WARNING)
        assert not get_logger().enabled()
        std.setLevel(logging.INFO)
        assert get_logger().enabled()  # asked each time, not remembered
    finally:
        std.setLevel(level)


def test_a_structlog_that_cannot_tell_its_levels_gets_every_event(unconfigured: None) -> None:
    # the standard library's BoundLogger over a logger with no levels (a PrintLogger)
    structlog.configure(
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.PrintLoggerFactory(),
    )
    assert get_logger().enabled(logging.DEBUG)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    assert not get_logger().enabled(logging.DEBUG)  # a new configuration is asked again


@anyio
async def test_structlog_reconfigured_between_turns_is_followed(
    tmp_path: Path, unconfigured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each turn asks its configuration afresh (what it remembers is found by identity): a
    # configure() or reset_defaults() between two turns decides what the next one builds.
    monkeypatch.setattr(logging.getLogger(LOGGER_NAME), "level", logging.WARNING)
    built: list[str] = []
    monkeypatch.setattr(EventLogger, "info", lambda self, event, **fields: built.append(event))
    built_by_turn: list[set[str]] = []
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        memory = NeotomaMemory(store, conversation_id="chat-7")
        levels = (logging.INFO, logging.WARNING, logging.DEBUG, None, logging.INFO)
        for number, level in enumerate(levels):
            if level is None:
                structlog.reset_defaults()  # the standard library logger decides: WARNING
            else:
                structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
            async with memory.turn("How is the plan going?", turn_id=f"t{number}") as t:
                t.reply = "Fine."
            built_by_turn.append(set(built))
            built.clear()
    assert built_by_turn == [TURN_EVENTS, set(), TURN_EVENTS, set(), TURN_EVENTS]


def test_a_structlog_keeping_its_configuration_elsewhere_is_asked_publicly(
    unconfigured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A structlog without the configuration object the check reads: get_config() answers.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    monkeypatch.delattr(structlog, "_config")
    assert not get_logger().enabled()
    assert get_logger().enabled(logging.ERROR)
    monkeypatch.undo()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    assert get_logger().enabled(logging.DEBUG)
