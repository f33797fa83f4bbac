"""The turn machine (``neotoma_agent._engine``) without an event loop: requests in, answers out.

Each test runs a step of the machine by hand or through a small synchronous loop over a real
store file (the embedded store's own actions, in this thread: no event loop, no transport),
and asserts the requests the step yields and what it returns. A fault the store would not
give by itself (a lost answer, a failed read) is thrown in where the request stood.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neotoma_agent import ToolCall
from neotoma_agent._engine.closing import MAX_RERUN_TRIES, closing_builder, closing_run, started_at
from neotoma_agent._engine.history import page_reads
from neotoma_agent._engine.machine import Entering, EnterState, TurnMachine
from neotoma_agent._engine.phase_records import Ending, Opened, Prompt
from neotoma_agent._engine.requests import (
    HistoryPage,
    Lookup,
    Machine,
    Observations,
    Request,
    Store,
    ToolObservations,
    run,
)
from neotoma_agent._recall.retrieval import EMPTY_RETRIEVAL, RetrievalStats, Retrieved
from neotoma_agent._records.keys import message_entity_id, turn_keys, turn_record_entity_id
from neotoma_agent._records.payloads import (
    ConversationSettings,
    RunFields,
    StorePayload,
    closing_payload,
    recorded_payload,
    user_payload,
)
from neotoma_agent._records.tool_payload import DEFAULT_PAYLOADS
from neotoma_agent.exceptions import (
    IdempotencyMismatchError,
    ServerError,
    TransportError,
    ValidationError,
)
from neotoma_agent.transport._bodies import store_body
from neotoma_agent.transport._query_results import ObservationList, RelatedEntities
from neotoma_agent.transport._results import (
    Entity,
    LookupResult,
    RecentConversation,
    StoreResult,
)
from neotoma_agent.transport.embedded import _connect
from neotoma_agent.transport.embedded._edges import retrieve_related_entities
from neotoma_agent.transport.embedded._read import (
    list_observations,
    retrieve_entity_by_identifier,
)
from neotoma_agent.transport.embedded._write import store

MACHINE = TurnMachine(ConversationSettings(platform="tests"), DEFAULT_PAYLOADS)
KEYS = turn_keys("chat-1", "t1")
RUN = RunFields(started_at="2026-12-01T10:00:00.000Z")


class Loop:
    """A synchronous driver over a real store file: answers each request with the store's
    own action, run in this thread, and keeps the requests in the order they came."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.requests: list[Request] = []

    def answer(self, request: Request) -> Any:
        conn = self.conn
        if isinstance(request, Store):
            payload = request.payload
            body = store_body(
                payload.entities,
                idempotency_key=payload.idempotency_key,
                relationships=payload.relationships,
            )
            raw = _connect.run(conn, store, body, writes=True)
            return StoreResult.from_json(raw, body["entities"])
        if isinstance(request, Lookup):
            body = {"identifier": request.identifier, "limit": request.limit}
            raw = _connect.run(conn, retrieve_entity_by_identifier, body, writes=False)
            return [(e.id, e.canonical_name) for e in LookupResult.from_json(raw).entities]
        if isinstance(request, Observations):
            body = {"entity_id": request.entity_id, "limit": 100, "offset": 0}
            raw = _connect.run(conn, list_observations, body, writes=False)
            return [o.fields for o in ObservationList.from_json(raw).observations]
        assert isinstance(request, ToolObservations)
        # as the async driver reads them: the record's REFERS_TO edges, each call's fields
        body = {
            "entity_id": request.record_id,
            "direction": "outbound",
            "max_hops": 1,
            "relationship_types": ["REFERS_TO"],
        }
        related = RelatedEntities.from_json(
            _connect.run(conn, retrieve_related_entities, body, writes=False)
        )
        calls = [e.id for e in related.entities if e.entity_type == "tool_invocation"]
        return [
            [fields for fields in self.answer(Observations(i)) if "invoked_at" in fields]
            for i in calls
        ]

    def run(self, machine: Machine[Any]) -> Any:
        """The step to its end, through the machine's own synchronous driver."""

        def answer(request: Request) -> Any:
            self.requests.append(request)
            return self.answer(request)

        return run(machine, answer)

    def kinds(self) -> list[tuple[str, str]]:
        """Each request as (its kind, its phase or the entity it names)."""
        return [
            (type(r).__name__, r.phase if isinstance(r, Store) else str(r[0]))
            for r in self.requests
        ]


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    conn = _connect.connect(str(tmp_path / "memory.db"), "NORMAL")()
    try:
        yield Loop(conn)
    finally:
        conn.close()


def entering(**kw: Any) -> Entering:
    return Entering(
        MACHINE,
        Prompt(KEYS, "What about Acme Corp?"),
        run=kw.pop("run", RUN),
        retrieved=EMPTY_RETRIEVAL,
        **kw,
    )


def open_turn(loop: Loop) -> Opened:
    enter = entering()
    loop.run(enter.store())
    return loop.run(enter.open())  # type: ignore[no-any-return]


def found(*ids: str) -> Retrieved:
    entities = tuple(Entity(i, "company", "acme", {}, {}) for i in ids)
    return Retrieved(entities, RetrievalStats(retrieved=len(ids)))


def mismatch() -> IdempotencyMismatchError:
    return IdempotencyMismatchError("refused", status=409, code="IDEMPOTENCY_MISMATCH")


# ------------------------------------------------------------------ the enter


def test_the_enter_is_one_store_request_that_may_not_wait(loop: Loop) -> None:
    opened = open_turn(loop)
    [request] = loop.requests
    assert isinstance(request, Store)
    assert (request.phase, request.lane, request.deferrable) == ("user", "chat-1", False)
    assert request.payload.idempotency_key == KEYS.idempotency_key("user")
    assert opened.user_message_id.startswith("ent_")
    assert opened.conversation_entity_id.startswith("ent_")
    assert (opened.replayed, opened.started_conversation) == (False, True)
    assert opened.started_at == RUN.started_at


def test_a_second_enter_of_the_turn_replays_and_says_what_it_was(loop: Loop) -> None:
    first = open_turn(loop)
    again = open_turn(loop)
    assert again.replayed
    assert again.prior_status == "open"
    assert again.user_message_id == first.user_message_id
    assert not again.started_conversation


def test_a_rerun_of_the_enter_with_another_start_replays_the_stored_one(loop: Loop) -> None:
    # A turn id that carries no time: the start is read off the clock, so a re-run differs.
    first = open_turn(loop)
    later = entering(run=RunFields(started_at="2026-12-01T10:05:00.000Z"))
    loop.requests.clear()
    loop.run(later.store())
    record = turn_record_entity_id("chat-1", "t1")
    assert loop.kinds() == [("Store", "user"), ("Observations", record), ("Store", "user")]
    assert later.stored is not None
    assert later.stored.replayed
    # the payload that replayed is the stored one, which the turn's close then carries on
    assert loop.run(later.open()).started_at == first.started_at


@pytest.mark.parametrize(
    ("text", "identifiers", "recency", "retriever", "refers_to_on_enter", "sequential"),
    [
        ("hi", [], False, False, False, True),  # nothing to look up: retrieval is instant
        ("hi", [], False, False, True, True),
        ("hi", ["Acme Corp"], False, False, False, False),  # a lookup: beside the store
        ("hi", [], True, False, False, False),  # the history's entities: beside the store
        ("hi", [], False, True, False, False),  # an application's retriever, too
        ("hi", ["Acme Corp"], True, True, True, True),  # the edges ride on the store
        ("tell me about zanzibar", [], False, False, False, False),  # a loose word
    ],
)
def test_retrieval_runs_before_the_store_only_when_it_must_or_is_instant(
    text: str,
    identifiers: list[str],
    recency: bool,
    retriever: bool,
    refers_to_on_enter: bool,
    sequential: bool,
) -> None:
    enter = Entering(MACHINE, Prompt(KEYS, text), run=RUN, retrieved=EMPTY_RETRIEVAL)
    enter.plan(
        identifiers,
        recency=recency,
        retriever=retriever,
        loose=True,
        refers_to_on_enter=refers_to_on_enter,
    )
    assert enter.sequential is sequential


def test_an_application_extractor_looks_up_no_loose_word() -> None:
    enter = Entering(
        MACHINE, Prompt(KEYS, "tell me about zanzibar"), run=RUN, retrieved=EMPTY_RETRIEVAL
    )
    enter.plan([], recency=False, retriever=False, loose=False, refers_to_on_enter=False)
    assert enter.sequential


def test_what_retrieval_found_first_rides_on_the_user_store() -> None:
    enter = entering()
    enter.plan(["Acme Corp"], recency=False, retriever=False, loose=True, refers_to_on_enter=True)
    enter.found(found("ent_" + "a" * 24))
    request = next(enter.store())
    assert isinstance(request, Store)
    assert [r["target_entity_id"] for r in request.payload.relationships if "REFERS" in str(r)]
    assert any(r.get("relationship_type") == "REFERS_TO" for r in request.payload.relationships)


def test_what_retrieval_found_beside_the_store_does_not_change_it() -> None:
    enter = entering()
    enter.plan(["Acme Corp"], recency=False, retriever=False, loose=True, refers_to_on_enter=False)
    request = next(enter.store())
    enter.found(found("ent_" + "a" * 24))
    assert isinstance(request, Store)
    assert enter.request is request.payload
    assert not any(r.get("relationship_type") == "REFERS_TO" for r in enter.request.relationships)
    assert enter.retrieved.ids == ("ent_" + "a" * 24,)


def test_an_answer_that_names_no_entity_is_completed_by_two_lookups(loop: Loop) -> None:
    open_turn(loop)
    enter = entering()
    steps = enter.store()
    request = next(steps)
    # a store's answer it could not align (no entity listed): replayed, but for what?
    with pytest.raises(StopIteration):
        steps.send(StoreResult.from_json({"replayed": True, "entities": []}))
    loop.requests.clear()
    opened = loop.run(enter.open())
    assert loop.kinds() == [
        ("Lookup", KEYS.user_turn_key),
        ("Lookup", "chat-1"),
    ]
    assert opened.user_message_id.startswith("ent_")
    assert opened.conversation_entity_id.startswith("ent_")
    assert isinstance(request, Store)


@pytest.mark.parametrize(
    ("error", "abandon"),
    [
        (ValidationError("no", status=400, code="BAD"), False),  # refused: nothing written
        (ServerError("boom", status=502, code="BAD_GATEWAY"), True),  # may have committed
        (TransportError("lost"), True),  # the answer was lost
        (TimeoutError(), True),
        (KeyboardInterrupt(), True),  # any cancellation of the caller
    ],
)
def test_a_failed_enter_is_abandoned_only_when_its_store_may_have_written(
    error: BaseException, abandon: bool
) -> None:
    enter = entering()
    assert not enter.must_abandon(error)  # not issued yet: nothing can have been written
    next(enter.store())
    assert enter.must_abandon(error) is abandon


def test_an_enter_sends_its_user_store_once_and_opens_only_on_its_answer(loop: Loop) -> None:
    enter = entering()
    assert enter.state is EnterState.NEW
    with pytest.raises(RuntimeError, match="cannot open the turn: the enter's user store is new"):
        next(enter.open())
    with pytest.raises(RuntimeError, match="never sent"):
        next(enter.reopen())  # nothing to abandon: nothing was sent
    steps = enter.store()
    next(steps)
    assert enter.state is EnterState.ISSUED
    issued = "the enter's user store is issued"
    with pytest.raises(RuntimeError, match=f"cannot send the user store: {issued}"):
        next(enter.store())
    with pytest.raises(RuntimeError, match=f"cannot open the turn: {issued}"):
        next(enter.open())
    steps.close()
    enter = entering()
    loop.run(enter.store())
    assert enter.state is EnterState.STORED
    assert loop.run(enter.open()).user_message_id.startswith("ent_")


def test_a_failed_enter_without_an_answer_sends_its_store_again_before_abandoning(
    loop: Loop,
) -> None:
    enter = entering()
    steps = enter.store()
    lost = next(steps)
    with pytest.raises(TransportError):
        steps.throw(TransportError("the answer was lost"))
    opened = loop.run(enter.reopen())
    assert loop.requests == [lost]  # the same store, under its own key
    assert opened.user_message_id.startswith("ent_")


# ------------------------------------------------------------------ the closings


def close(loop: Loop, opened: Opened, reply: str, **kw: Any) -> Any:
    ending = Ending(opened, "completed", reply, tools=tuple(kw.pop("tools", ())))
    return loop.run(MACHINE.close(ending, kw.pop("run", None) or closing_run(ending)))


def test_a_completed_close_is_one_store_request_that_may_wait(loop: Loop) -> None:
    opened = open_turn(loop)
    loop.requests.clear()
    outcome = close(loop, opened, "Acme is a customer.")
    [request] = loop.requests
    assert isinstance(request, Store)
    assert (request.phase, request.lane, request.deferrable) == ("assistant", "chat-1", True)
    assert outcome.stored_status == "completed"
    assert outcome.assistant_message_id
    assert outcome.turn_record_id
    assert not outcome.replayed


def test_a_rerun_of_a_close_reads_the_record_once_and_replays(loop: Loop) -> None:
    opened = open_turn(loop)
    close(loop, opened, "Acme is a customer.")
    loop.requests.clear()
    later = RunFields(started_at=opened.started_at, ended_at="2026-12-01T11:00:00.000Z")
    outcome = close(loop, opened, "Acme is a customer.", run=later)
    record = turn_record_entity_id("chat-1", "t1")
    assert loop.kinds() == [
        ("Store", "assistant"),
        ("Observations", record),
        ("Store", "assistant"),
    ]
    assert outcome.replayed
    assert outcome.stored_status == "completed"


def test_a_close_with_another_reply_is_refused_with_the_revision_hint(loop: Loop) -> None:
    opened = open_turn(loop)
    first = RunFields(started_at=opened.started_at, ended_at="2026-12-01T10:01:00.000Z")
    close(loop, opened, "Acme is a customer.", run=first)
    loop.requests.clear()
    later = RunFields(started_at=opened.started_at, ended_at="2026-12-01T10:02:00.000Z")
    with pytest.raises(IdempotencyMismatchError) as refused:
        close(loop, opened, "Acme is a supplier.", run=later)
    assert "revision=2" in (refused.value.hint or "")
    assert "reply or tool calls" in str(refused.value)
    # the record's earlier run was read and sent again (the record holds no reply text),
    # and refused too: the mismatch stands
    assert [k for k, _ in loop.kinds()] == ["Store", "Observations", "Store"]


def test_a_failed_read_of_earlier_runs_leaves_the_mismatch_standing() -> None:
    opened = Opened(KEYS, None, "ent_" + "1" * 24, "ent_" + "2" * 24, None, False, None)
    steps = MACHINE.close(Ending(opened, "completed", "reply"), RUN)
    assert isinstance(next(steps), Store)
    read = steps.throw(mismatch())
    assert read == Observations(turn_record_entity_id("chat-1", "t1"))
    with pytest.raises(IdempotencyMismatchError, match="already stored with a different"):
        steps.throw(TransportError("down"))


def test_an_abandon_never_overwrites_a_completed_turn() -> None:
    opened = Opened(KEYS, None, "ent_" + "1" * 24, "", "ent_" + "3" * 24, True, "completed")
    steps = MACHINE.close(Ending(opened, "abandoned", "partial", error_class="RuntimeError"), RUN)
    with pytest.raises(StopIteration) as done:
        next(steps)  # no request at all
    outcome = done.value.value
    assert (outcome.stored_status, outcome.replayed) == ("completed", True)
    assert outcome.turn_record_id == opened.turn_record_id


def test_a_second_different_abandonment_is_stored_under_its_content_key(loop: Loop) -> None:
    opened = open_turn(loop)

    def abandon(error_class: str) -> Any:
        ending = Ending(opened, "abandoned", "", error_class=error_class)
        return loop.run(MACHINE.close(ending, closing_run(ending)))

    abandon("RuntimeError")
    loop.requests.clear()
    outcome = abandon("TimeoutError")
    keys = [r.payload.idempotency_key for r in loop.requests if isinstance(r, Store)]
    base = KEYS.idempotency_key("abandoned")
    assert keys[0] == base
    assert keys[-1].startswith(f"{base}-")
    assert len(keys[-1]) == len(base) + 13
    assert (outcome.stored_status, outcome.replayed) == ("abandoned", False)
    # the same abandonment again collapses into the one under the content key
    loop.requests.clear()
    assert abandon("TimeoutError").replayed


@pytest.mark.parametrize(
    ("status", "reply", "error_class", "phase", "messages"),
    [
        ("completed", "Acme is a customer.", None, "assistant", ["Acme is a customer."]),
        ("abandoned", "Acme is", "CancelledError", "abandoned", ["Acme is"]),
        ("abandoned", "", "CancelledError", "abandoned", []),
    ],
)
def test_a_turns_ending_is_one_store_of_what_it_says(
    loop: Loop,
    status: Literal["completed", "abandoned"],
    reply: str,
    error_class: str | None,
    phase: str,
    messages: list[str],
) -> None:
    opened = open_turn(loop)
    loop.requests.clear()
    ending = Ending(
        opened, status, reply, ("ent_" + "9" * 24,), error_class=error_class, model="m-1"
    )
    outcome = loop.run(MACHINE.close(ending, closing_run(ending)))
    [request] = loop.requests
    assert isinstance(request, Store)
    assert (request.phase, request.deferrable) == (phase, True)
    payload = request.payload
    assert payload.idempotency_key == KEYS.idempotency_key(ending.phase)
    record = payload.entities[payload.turn_record_index]
    assert (record["status"], record.get("error_class"), record["model"]) == (
        status,
        error_class,
        "m-1",
    )
    assert record["retrieved_entity_ids"] == ["ent_" + "9" * 24]
    texts = [e["content"] for e in payload.entities if e["entity_type"] == "conversation_message"]
    assert texts == messages
    assert outcome.stored_status == status
    assert (outcome.assistant_message_id is not None) == bool(messages)


def test_the_conversation_id_is_carried_by_the_turn_keys_alone() -> None:
    # One record carries it: the settings a conversation's payloads share hold no id.
    assert "conversation_id" not in ConversationSettings._fields
    keys = turn_keys("chat-9", "t1")
    settings = ConversationSettings(platform="tests", title="Trip")
    built = [
        user_payload(settings, keys, "hi"),
        recorded_payload(settings, keys, "hi", "yo"),
        closing_payload(settings, keys, "yo", conversation_entity_id=None, user_message_id=None),
    ]
    for payload in built:
        assert payload.conversation_index is not None
        conversation = payload.entities[payload.conversation_index]
        assert (conversation["conversation_id"], conversation["title"]) == ("chat-9", "Trip")
        record = payload.entities[payload.turn_record_index]
        assert record["session_id"] == "chat-9"


def test_a_rerun_whose_calls_ran_again_takes_the_stored_clock_readings(loop: Loop) -> None:
    opened = open_turn(loop)
    args: dict[str, Any] = {"args": {"q": "acme"}, "result": ["x"], "call_id": "c1"}
    call = ToolCall.create("search", invoked_at="2026-12-01T10:00:01.000Z", duration_ms=5, **args)
    first = close(loop, opened, "done", tools=[call])
    # the re-run's call ran again, later and for another while: the same call otherwise
    again = ToolCall.create("search", invoked_at="2026-12-01T10:07:00.000Z", duration_ms=9, **args)
    later = RunFields(started_at=opened.started_at, ended_at="2026-12-01T11:00:00.000Z")
    loop.requests.clear()
    outcome = close(loop, opened, "done", tools=[again], run=later)
    record = turn_record_entity_id("chat-1", "t1")
    # refused; the record's earlier run tried and refused (its call's readings differ);
    # then the calls read, and the earlier run's store sent with their readings: a replay
    assert [k for k, _ in loop.kinds()] == [
        "Store",
        "Observations",
        "Store",
        "ToolObservations",
        "Store",
        "Observations",
        "Store",
    ]
    assert loop.requests[3] == ToolObservations(record)
    last = loop.requests[-1]
    assert isinstance(last, Store)
    [index] = last.payload.tool_indexes
    assert last.payload.entities[index]["invoked_at"] == call.invoked_at
    assert outcome.replayed
    [stored] = outcome.stored_tools
    assert (stored.invoked_at, stored.duration_ms) == (call.invoked_at, call.duration_ms)
    assert outcome.tool_ids == first.tool_ids


def test_a_rerun_whose_calls_differ_keeps_the_mismatch(loop: Loop) -> None:
    opened = open_turn(loop)
    close(loop, opened, "done", tools=[ToolCall.create("search", args={"q": "a"}, call_id="c1")])
    other = ToolCall.create("search", args={"q": "acme corp"}, call_id="c1")
    loop.requests.clear()
    with pytest.raises(IdempotencyMismatchError, match="reply or tool calls"):
        close(loop, opened, "done", tools=[other])
    # the calls were read, and no stored call is this one but for its clock readings
    assert [k for k, _ in loop.kinds()][-1] == "ToolObservations"


# ------------------------------------------------------------------ properties


@settings(max_examples=30, deadline=None)
@given(
    ended=st.lists(
        st.integers(min_value=0, max_value=10**12).map(lambda ms: f"t{ms}"),
        min_size=0,
        max_size=12,
        unique=True,
    )
)
def test_a_rerun_tries_the_matching_earlier_runs_newest_first_and_no_more(
    ended: list[str],
) -> None:
    opened = Opened(KEYS, None, "ent_" + "1" * 24, "ent_" + "2" * 24, None, False, None)
    ending = Ending(opened, "completed", "reply")
    keyed = closing_builder(MACHINE.conversation, ending, ())

    def build(run: RunFields) -> StorePayload:
        return keyed(run, None)

    runs = [RunFields(started_at=None, ended_at=e) for e in ended]
    # the record's observations as a store keeps them: each run's fields, newest first
    observations = [
        {k: v for k, v in _record(build(run)).items() if k != "entity_type"} for run in runs
    ]
    now = RunFields(ended_at="now")
    steps = MACHINE.close(ending, now)
    assert isinstance(next(steps), Store)
    request = steps.throw(mismatch())
    assert request == Observations(turn_record_entity_id("chat-1", "t1"))
    assert refused_stores(steps, observations) == [build(run) for run in runs[:MAX_RERUN_TRIES]]


def _record(payload: StorePayload) -> Mapping[str, Any]:
    return payload.entities[payload.turn_record_index]


def refused_stores(steps: Machine[Any], answer: Any) -> list[StorePayload]:
    """Send ``answer``, refuse every store the step sends then: the payloads it sent, once
    it gives up with the mismatch."""
    tried: list[StorePayload] = []
    try:
        request = steps.send(answer)
        while isinstance(request, Store):
            tried.append(request.payload)
            request = steps.throw(mismatch())
    except IdempotencyMismatchError:
        return tried
    raise AssertionError(f"a request after the stores: {request!r}")


def test_started_at_is_the_time_a_time_ordered_id_carries() -> None:
    keys = turn_keys("chat-1", "0192f1d2-7a3b-7c4d-8e5f-0123456789ab")
    assert started_at(keys) == started_at(keys)  # no clock: a re-run sends the same value
    assert started_at(keys).startswith("2024-")


# ------------------------------------------------------------------ the history pages


def _message(message_id: str, turn_id: str, role: str) -> dict[str, Any]:
    suffix = ":assistant" if role == "assistant" else ""
    return {
        "message_id": message_id,
        "role": role,
        "content": f"{role} of {turn_id}",
        "turn_key": f"chat-1:{turn_id}{suffix}",
    }


def test_a_history_read_asks_for_the_last_turns_before_the_turn_then_the_page_before() -> None:
    steps = page_reads("chat-1", "ent_c", 2, "t9", None)
    bound = message_entity_id("chat-1", "t9", "user")
    # two turns wanted: two messages each, two more for turns interleaved at the edge
    assert next(steps) == HistoryPage("ent_c", 6, bound)
    # the page holds two turns and says there is more: one more turn is needed to know
    # the oldest one is whole, so the page before the oldest message is asked for
    page = {
        "messages": [
            _message("m3", "t3", "user"),
            _message("m4", "t3", "assistant"),
            _message("m5", "t4", "user"),
        ],
        "has_more": True,
        "turn_records": [],
    }
    assert steps.send(RecentConversation.from_json(page)) == HistoryPage("ent_c", 6, "m3")
    older = {
        "messages": [_message("m1", "t2", "user"), _message("m2", "t2", "assistant")],
        "has_more": True,
        "turn_records": [],
    }
    with pytest.raises(StopIteration) as done:
        steps.send(RecentConversation.from_json(older))
    # three turns now, the oldest cut off (there is more before it): the last two kept
    assert [g.turn_id for g in done.value.value.groups] == ["t3", "t4"]


def test_a_store_that_does_not_page_answers_every_message_in_one_page() -> None:
    steps = page_reads("chat-1", "ent_c", None, None, None)
    assert next(steps) == HistoryPage("ent_c", 1000, None)
    page = RecentConversation.from_json({"messages": [_message("m1", "t1", "user")]})
    with pytest.raises(StopIteration) as done:
        steps.send(page)
    assert [m.message_id for m in done.value.value] == ["m1"]
