"""``with memory.turn(...)``: the turn matrix, on the embedded store and over HTTP.

Completed, raised, Ctrl-C (a real SIGINT, in the body, during the closing store, during
the enter), SystemExit and a hung closing store; what each stored is read back from the
store (the turn record, the messages), never from what was sent.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from sync_support import ctrl_c, new_transport, sync_memory, sync_store
from turn_support import capture_logs, messages, turn_record

from neotoma_agent import TurnCloseError, TurnResult, TurnState, TurnStateError
from neotoma_agent.sync import SyncStore, SyncTurn
from neotoma_agent.testing import FaultyTransport, key_phase

__all__ = ["ctrl_c", "new_transport", "sync_store"]  # fixtures

NewTransport = Callable[[], Any]


def record(store: SyncStore, turn_id: str, conversation_id: str = "chat-1") -> dict[str, Any]:
    return store.call(turn_record, store.transport, conversation_id, turn_id)


def texts(store: SyncStore, conversation_entity_id: str) -> dict[str, str]:
    found = store.call(messages, store.transport, conversation_entity_id)
    return {key: str(m["content"]) for key, m in found.items()}


def escaped(turn: SyncTurn, body: Callable[[SyncTurn], object]) -> BaseException:
    """Run ``body(t)`` in ``with turn as t:``; what came out of the block."""
    try:
        with turn as t:
            body(t)
    except BaseException as exc:
        return exc
    raise AssertionError("nothing came out of the turn's block")


def throw(error: BaseException) -> None:
    raise error


def phase_is(phase: str) -> Callable[[str, tuple[Any, ...], dict[str, Any]], bool]:
    return lambda m, a, kw: key_phase(kw["idempotency_key"]) == phase


def test_completed_turn_stores_the_user_message_first_then_the_exact_reply(
    sync_store: SyncStore,
) -> None:
    memory = sync_memory(sync_store)
    acme = memory.remember("company", name="Acme Corp", website="acme.com")
    with memory.turn("What do we know about Acme Corp?", turn_id="t1") as t:
        assert record(sync_store, "t1")["status"] == "open"  # stored before the body
        assert t.retrieved_ids == (acme,)
        assert "Acme Corp" in t.context()
        for chunk in t.stream(iter(["Acme Corp ", "is a ", "client."])):
            assert t.reply.endswith(chunk)
        t.reply += " ✓"
    assert t.result.completed
    assert record(sync_store, "t1")["status"] == "completed"
    assert texts(sync_store, t.result.conversation_entity_id or "") == {
        "chat-1:t1": "What do we know about Acme Corp?",
        "chat-1:t1:assistant": "Acme Corp is a client. ✓",
    }


def test_the_callers_log_context_reaches_the_turns_events(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    with (
        capture_logs() as logs,
        structlog.contextvars.bound_contextvars(request_id="r-7"),
        memory.turn("hi", turn_id="t1") as t,
    ):
        t.reply = "ok"
    (closed,) = [e for e in logs if e["event"] == "turn.closed"]
    assert (closed["request_id"], closed["turn_id"]) == ("r-7", "t1")


def test_the_body_sees_history_and_remembers(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    with memory.turn("first", turn_id="t1") as t:
        t.reply = "one"
    with memory.turn("second", turn_id="t2") as t:
        assert [(h.turn_id, h.user, h.reply) for h in t.history] == [("t1", "first", "one")]
        task = t.remember("task", title="Call Acme", status="open")
        t.reply = f"noted {task}"
    assert t.result.produced_ids == (task,)
    assert [h.reply for h in memory.history()] == ["one", f"noted {task}"]


#: SyncTurn's read-only attributes: each reads its async Turn's own
FORWARDED = (
    "state",
    "conversation_id",
    "turn_id",
    "turn_key",
    "user_message",
    "user_message_id",
    "conversation_entity_id",
    "retrieved",
    "retrieved_ids",
    "retrieval",
    "history",
    "cited_ids",
    "produced_ids",
    "tools",
)


def test_the_turns_read_only_attributes_are_its_async_turns_own(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    acme = memory.remember("company", name="Acme Corp")
    with memory.turn("first", turn_id="t1") as t:
        t.reply = "one"
    with memory.turn("What about Acme Corp?", turn_id="t2") as t:
        t.cite(acme)
        t.record_tool("search", args={"q": "Acme"}, result="found")
        t.remember("task", title="Call Acme")
        # typed as the async Turn's own (mypy --strict reads these lines)
        state: TurnState = t.state
        ids: tuple[str, ...] = t.retrieved_ids
        reply: str = t.reply
        assert (state, ids, reply) == (TurnState.OPEN, (acme,), "")
        assert {name: getattr(t, name) for name in FORWARDED} == {
            name: getattr(t.turn, name) for name in FORWARDED
        }
        assert t.cited_ids == (acme,)
        assert [h.turn_id for h in t.history] == ["t1"]
        with pytest.raises(AttributeError, match=r"SyncTurn\.state is read-only"):
            t.state = TurnState.COMPLETED  # type: ignore[misc]  # mypy refuses it too
    result: TurnResult = t.result
    assert (result, t.state) == (t.turn.result, TurnState.COMPLETED)
    assert memory.conversation_id == memory.memory.conversation_id == "chat-1"
    for name in FORWARDED:  # help() shows each with the async Turn's docstring
        assert f"Turn.{name}" in (getattr(SyncTurn, name).__doc__ or "")


def test_a_raising_body_is_abandoned_with_its_partial_reply_and_the_error_unchanged(
    sync_store: SyncStore,
) -> None:
    memory = sync_memory(sync_store)
    error = ConnectionError("the model went away")

    def body(t: SyncTurn) -> None:
        t.reply += "Let me"
        raise error

    t = memory.turn("hi", turn_id="t1")
    assert escaped(t, body) is error
    assert t.result.status is TurnState.ABANDONED
    assert record(sync_store, "t1")["status"] == "abandoned"
    assert t.result.error_class == "ConnectionError"
    assert texts(sync_store, t.result.conversation_entity_id or "")["chat-1:t1:assistant"] == (
        "Let me"
    )


def test_ctrl_c_in_the_body_is_abandoned_with_the_partial_reply_then_propagates(
    sync_store: SyncStore, ctrl_c: Callable[[float], Any]
) -> None:
    memory = sync_memory(sync_store)

    def body(t: SyncTurn) -> None:
        t.reply += "Half a"
        ctrl_c(0.05)
        time.sleep(5)  # a blocking model call, interrupted by the signal
        t.reply += " never"

    t = memory.turn("hi", turn_id="t1")
    assert isinstance(escaped(t, body), KeyboardInterrupt)
    assert t.result.status is TurnState.ABANDONED
    assert t.result.error_class == "KeyboardInterrupt"
    assert record(sync_store, "t1")["status"] == "abandoned"
    assert texts(sync_store, t.result.conversation_entity_id or "")["chat-1:t1:assistant"] == (
        "Half a"
    )


@pytest.mark.parametrize("presses", [1, 3])
def test_ctrl_c_during_the_closing_store_waits_for_it_then_propagates(
    new_transport: NewTransport, ctrl_c: Callable[[float], Any], presses: int
) -> None:
    faulty = FaultyTransport(new_transport()).delay("store", 0.4, when=phase_is("assistant"))
    with SyncStore(faulty) as store:
        memory = sync_memory(store)
        started = time.monotonic()

        def body(t: SyncTurn) -> None:
            t.reply = "The whole reply."
            for i in range(presses):
                ctrl_c(0.1 + 0.05 * i)  # lands while __exit__ waits for the store

        t = memory.turn("hi", turn_id="t1")
        assert isinstance(escaped(t, body), KeyboardInterrupt)
        assert time.monotonic() - started >= 0.4  # raised only once the store had ended
        assert t.result.completed  # the body had finished: the reply is whole
        assert record(store, "t1")["status"] == "completed"
        conversation = t.result.conversation_entity_id or ""
        assert texts(store, conversation)["chat-1:t1:assistant"] == "The whole reply."


def test_ctrl_c_while_entering_cancels_the_enter_and_closes_the_turn(
    new_transport: NewTransport, ctrl_c: Callable[[float], Any]
) -> None:
    faulty = FaultyTransport(new_transport()).delay("store", 0.5, when=phase_is("user"))
    with SyncStore(faulty) as store:
        memory = sync_memory(store)
        turn = memory.turn("hi", turn_id="t1")
        ctrl_c(0.1)
        assert isinstance(escaped(turn, lambda t: pytest.fail("the body ran")), KeyboardInterrupt)
        # Cancelled once its user store may have been sent: closed as abandoned, as an
        # asyncio cancellation of the enter is, before the interrupt went on.
        assert turn.result.status is TurnState.ABANDONED
        assert turn.result.error_class == "asyncio.exceptions.CancelledError"
        assert record(store, "t1")["status"] == "abandoned"


def test_system_exit_in_the_body_is_abandoned_then_propagates_unchanged(
    sync_store: SyncStore,
) -> None:
    memory = sync_memory(sync_store)

    def body(t: SyncTurn) -> None:
        t.reply = "Bye"
        sys.exit(3)

    t = memory.turn("hi", turn_id="t1")
    exit_ = escaped(t, body)
    assert isinstance(exit_, SystemExit)
    assert exit_.code == 3
    assert t.result.error_class == "SystemExit"
    assert record(sync_store, "t1")["status"] == "abandoned"
    assert texts(sync_store, t.result.conversation_entity_id or "")["chat-1:t1:assistant"] == "Bye"


def test_a_hung_closing_store_ends_at_close_timeout(new_transport: NewTransport) -> None:
    faulty = FaultyTransport(new_transport()).hang("store", when=phase_is("assistant"))
    with SyncStore(faulty) as store:
        memory = sync_memory(store, close_timeout=0.3)
        started = time.monotonic()
        t = memory.turn("hi")
        failure = escaped(t, lambda t: setattr(t, "reply", "lost"))
        assert isinstance(failure, TurnCloseError)
        assert "close_timeout" in str(failure)
        assert time.monotonic() - started < 3
        assert t.result.status is TurnState.FAILED
        assert isinstance(t.result.close_error, TimeoutError)


def test_a_hung_abandoning_store_lets_the_body_error_through_at_close_timeout(
    new_transport: NewTransport,
) -> None:
    faulty = FaultyTransport(new_transport()).hang("store", when=phase_is("abandoned"))
    with SyncStore(faulty) as store:
        memory = sync_memory(store, close_timeout=0.3)
        error = ValueError("body")
        t = memory.turn("hi")
        assert escaped(t, lambda t: throw(error)) is error
        assert t.result.status is TurnState.FAILED


def test_a_turn_is_entered_once_and_refuses_writes_after_it_closed(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    turn = memory.turn("hi")
    with turn as t:
        t.reply = "ok"
    assert isinstance(escaped(turn, lambda t: None), TurnStateError)
    with pytest.raises(TurnStateError):
        t.reply += "more"
    with pytest.raises(TurnStateError, match="no result"):
        _ = memory.turn("unused").result


def test_a_failed_enter_raises_its_error_and_the_body_never_runs(
    new_transport: NewTransport,
) -> None:
    error = PermissionError("refused")
    faulty = FaultyTransport(new_transport()).fail("store", error, when=phase_is("user"))
    with SyncStore(faulty) as store:
        memory = sync_memory(store)
        assert escaped(memory.turn("hi"), lambda t: pytest.fail("the body ran")) is error


def test_explicit_api_opens_and_closes_a_turn_across_calls(sync_store: SyncStore) -> None:
    memory = sync_memory(sync_store)
    opened = memory.open_turn("Book the hotel", turn_id="t1")
    assert record(sync_store, "t1")["status"] == "open"
    booking = opened.produce("booking", name="Hotel Lisboa")
    result = memory.close_turn(opened, "Booked.", produced=[booking])
    assert result.completed
    assert result.produced_ids == (booking.entity_id,)
    dropped = memory.open_turn("And a car?", turn_id="t2")
    assert memory.abandon_turn(dropped, error="UserLeft", partial_reply="Look").error_class == (
        "UserLeft"
    )
    memory.record_turn("Imported", "Answer", turn_id="t3")
    assert [(h.turn_id, h.status) for h in memory.history()] == [
        ("t1", "completed"),
        ("t2", "abandoned"),
        ("t3", "completed"),
    ]


def test_blocking_methods_keep_the_async_signatures_and_errors(sync_store: SyncStore) -> None:
    import inspect

    from neotoma_agent import NeotomaMemory
    from neotoma_agent.sync import SyncMemory

    for name in ("remember", "history", "open_turn", "close_turn", "abandon_turn", "record_turn"):
        assert inspect.signature(getattr(SyncMemory, name)) == inspect.signature(
            getattr(NeotomaMemory, name)
        )
        assert "Blocking" in (getattr(SyncMemory, name).__doc__ or "")
    from neotoma_agent import Turn
    from neotoma_agent.sync import SyncTurn

    def parameters(function: object) -> list[inspect.Parameter]:
        return list(inspect.signature(function).parameters.values())[1:]  # type: ignore[arg-type]

    # turn() and t.context() take what the async ones take, stated there once.
    assert parameters(SyncMemory.turn) == parameters(NeotomaMemory.turn)
    assert parameters(SyncTurn.context) == parameters(Turn.context)
    memory = sync_memory(sync_store)
    with pytest.raises(ValueError, match="turn_id"):
        memory.turn("hi", turn_id="a:b")
    with pytest.raises(TypeError, match="turnid"):
        memory.turn("hi", turnid="t1")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="SyncStore"):
        SyncMemory(sync_store.transport, conversation_id="c")  # type: ignore[arg-type]
