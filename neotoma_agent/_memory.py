"""``NeotomaMemory``: one conversation's settings and the public API of its turns.

``turn()`` gives a :class:`~neotoma_agent.Turn` (an async context manager);
``open_turn`` / ``close_turn`` / ``abandon_turn`` run the store phases one call each, and
``record_turn`` writes a finished turn in a single store. The phases themselves (what each
store holds, the shielded close) live in ``_phases``; results are built in
``_turn_result``; the explicit API's open turn is ``_open_turn.OpenTurn``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any, Literal, TypedDict

import attrs

from ._engine.closing import check_model as _check_model
from ._engine.machine import tool_ids
from ._engine.phase_records import CloseOutcome, Ending, EnterAttempt, Opened, Prompt, unopened
from ._neotoma.forget import (
    Forgotten,
    forget_conversation,
    forget_entity,
    restore_conversation,
    restore_entity,
)
from ._open_turn import OpenTurn
from ._phases import Phases
from ._recall.history import HistoryTurn, read_history
from ._recall.retrieval import EMPTY_RETRIEVAL, Retrieved
from ._recall.tool_reads import StoredToolCall, read_tool_details
from ._records.checks import check_optional_count
from ._records.keys import (
    TurnKeys,
    new_turn_id,
    turn_id_ms,
    turn_keys,
    turn_record_entity_id,
    validate_entity_id,
    validate_revision,
    validate_turn_id,
)
from ._records.keys import (
    conversation_entity_id as derive_conversation_entity_id,
)
from ._records.payloads import (
    Produced,
    merge_produced,
    produced_entity,
    recorded_payload,
    remembered_payload,
    validate_user_extra,
)
from ._records.text import check_text
from ._records.tools import ToolCall, check_tools, iso_ms, merge_tools
from ._records.user_id import identify, tenant_for
from ._settings import DEFAULT_HISTORY_TURNS, MemorySettings
from ._turn import Turn
from ._turn_result import TurnResult, close_failure, finish, finish_attempt
from ._util.log import bound_context
from ._util.must_await import MustAwait
from ._util.otel import CLOSE_TURN_SPAN, OPEN_TURN_SPAN, TURN_SPAN, Explicit, explicit
from ._util.shield import raise_deferred
from ._util.signature import check_options
from .exceptions import TransportError, error_class_name
from .transport._base import Entity, EntityDeletion
from .transport._search_fallback import search as search_store
from .transport._search_results import SearchResult

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["DEFAULT_HISTORY_TURNS", "EndOptions", "NeotomaMemory", "TurnIds", "TurnOptions"]


class TurnIds(TypedDict, total=False):
    """The keyword options that name a turn, as ``memory.turn(...)`` and
    ``with_memory``'s calls take them; each one left out is ``None``."""

    turn_id: str | None
    """The turn's id; left out, a fresh time-ordered one. A stable one (a harness message
    id) makes a retried turn replay instead of being stored twice."""
    turn_number: int | None
    """The turn's number in the conversation, if the caller counts them (on the turn
    record; a context block tags the turn ``turn N``)."""
    user_extra: Mapping[str, Any] | None
    """Extra fields stored on the user message (plain JSON)."""
    revision: int | None
    """``2, 3, …``: a regenerated reply for a turn id already stored."""


class TurnOptions(TurnIds, total=False):
    """The keyword options of ``memory.turn(...)``, ``open_turn`` and ``record_turn``."""

    model: str | None
    """The model that answers (stored on the turn record)."""


class EndOptions(TypedDict, total=False):
    """The keyword options of ``close_turn`` and ``abandon_turn``: what the turn's end
    cites, produced and called (each empty when left out), and what a turn opened in
    another process is resumed with (each ``None`` when left out)."""

    refers_to: Sequence[str | Entity]
    """Entities (ids or entities) the reply REFERS_TO besides those retrieval linked."""
    user_message_id: str | None
    """A turn opened in another process: its user message's id (else looked up)."""
    retrieved_ids: Sequence[str] | None
    """A turn opened in another process: what its retrieval linked, so that the user
    message's edges are written."""
    revision: int | None
    """A turn opened in another process: the revision it was opened with."""
    turn_number: int | None
    """A turn opened in another process: its number."""
    produced: Sequence[Produced]
    """``OpenTurn.produce()`` records, written by the same store; the reply REFERS_TO them."""
    tools: Sequence[ToolCall]
    """``ToolCall`` records (made here or in another process), written with the turn."""
    model: str | None
    """The model that answered, when ``open_turn`` did not name it."""


#: How a turn the explicit API closes ends: its status, its text, its error class.
_How = tuple[Literal["completed", "abandoned"], str, str | None]


def _check_produced(produced: Sequence[Produced]) -> tuple[Produced, ...]:
    if isinstance(produced, (str, Produced)) or not all(isinstance(p, Produced) for p in produced):
        raise TypeError("produced takes a sequence of OpenTurn.produce() records")
    return merge_produced(produced)


def _check_turn_number(turn_number: object) -> int | None:
    return check_optional_count(turn_number, "turn_number")


@attrs.frozen
class NeotomaMemory(MemorySettings):
    """Turn-protocol memory for one conversation, over any :class:`Transport`.

    ``async with memory.turn(user_message) as t:`` stores the user message before the body
    runs and the exact reply after it, wired to the entities the user named (bounded
    retrieval), exactly once per ``turn_id``, whatever the body does::

        memory = NeotomaMemory(store, conversation_id="chat-42", history_turns=5)
        await memory.remember("company", name="Acme Corp", website="acme.com")  # a seed
        async with memory.turn("What do we know about Acme Corp?") as t:
            prompt = f"{t.context(max_chars=2000)}\\n\\nUser: {t.user_message}"
            async for chunk in t.stream(llm(prompt)):   # your model's stream
                ...
            task = t.remember("task", title="Call Acme Corp", status="open")
            t.reply += f" (follow-up: {task})"
        t.result.completed, t.result.produced_ids

    Outside a turn: :meth:`remember` stores one entity, :meth:`history` reads the last
    turns; ``open_turn`` / ``close_turn`` / ``abandon_turn`` run the phases one call each;
    ``record_turn`` stores a finished turn.

    Settings: ``retrieval_limit`` entities at most per turn, from at most
    ``max_identifiers`` identifiers (``extractor``, default
    :func:`~neotoma_agent.default_extractor`), looked up ``max_concurrency`` at a time
    within ``retrieval_timeout`` seconds, each lookup asking for up to ``lookup_limit``
    candidates. ``close_timeout`` bounds the closing store. ``refers_to_on_enter`` writes the
    user message's REFERS_TO edges with the message (after retrieval, one more round trip)
    instead of with the reply. ``include_bookkeeping`` lets retrieval return conversations,
    messages and turn records. ``history_turns``: how many earlier turns each turn reads as
    ``t.history`` (concurrently with retrieval and the user store, so at no extra round
    trip; ``0`` turns it off). ``link_threshold`` (0 to 1, default 0.75): entities
    retrieval scores below it are candidates only (``Retrieved.candidates``), never
    retrieved or linked. ``retriever``: an application's own :class:`~neotoma_agent.Retriever`
    (an embedding search), merged into the ranking under the same deadline. How entities
    are scored and ordered: ``neotoma_agent._recall.ranking`` and the retrieval guide
    (docs/retrieval.md).

    Tool calls (``t.tool``, ``t.record_tool``) are stored with their arguments and result on
    the ``tool_invocation`` observation: ``tool_payloads="full"`` (the default) keeps each
    value up to ``tool_payload_chars`` characters of compact JSON (longer ones are cut with
    a ``…[+N chars]`` marker, the original length kept beside), ``"summary"`` a one-line
    summary of each, ``"none"`` neither. ``redact_tool(tool_name, field, value)`` sees each
    value first and returns what to store (see :class:`~neotoma_agent.ToolRedactor`).
    """

    _open_turns: dict[str, OpenTurn] = attrs.field(init=False, factory=dict, repr=False)
    _phases: Phases = attrs.field(
        init=False, default=attrs.Factory(Phases, takes_self=True), repr=False, eq=False
    )

    # ------------------------------------------------------------------ public API

    def turn(self, user_message: str, **options: Unpack[TurnOptions]) -> Turn:
        """A new turn for ``user_message``; use it as ``async with memory.turn(...) as t:``.

        ``turn_id`` defaults to a fresh time-ordered id; pass a stable one (a harness message
        id) to make a retried turn replay instead of being stored twice. ``revision=2, 3, …``
        records a regenerated reply for a turn id already stored. ``model`` names the model
        that answers (stored on the turn record); ``turn_number`` and ``user_extra`` (fields
        stored on the user message) are the caller's. Every option left out is ``None``.
        Bad ids raise ``ValueError`` here, before any I/O, and so does a misspelt option
        (``TypeError``).
        """
        return Turn._create(self._phases, self._prepare("turn", user_message, options))

    def remember(self, entity_type: str, /, **fields: Any) -> Coroutine[Any, Any, str]:
        """Store one entity now (a fact to seed, a tool's result); await it for its id.

        ``remember`` is one act with one answer everywhere: record an entity, get its id.
        ``t.remember`` (in a turn) and :meth:`OpenTurn.remember` (explicit API) are sync:
        the entity rides on the turn's closing store and the reply REFERS_TO it. This one
        stores at once, so it is awaited: one store call under a key derived from the
        entity's content, so repeating it replays instead of writing again. The id is the
        server's (an entity with the same type and name gets a new observation on the same
        id). The same checks as :meth:`Turn.remember` run at the call, before any I/O
        (``TypeError``, ``ValueError``, :class:`~neotoma_agent.ValidationError`). A call
        never awaited is loud: using its value raises ``TypeError``, and dropping it logs
        ``remember.not_awaited`` at ERROR (nothing was stored). To link an entity stored
        this way to a reply, cite it (``t.cite(entity_id)``, or ``refers_to=`` on
        ``close_turn``)::

            acme = await memory.remember("company", name="Acme Corp", website="acme.com")
        """
        item = produced_entity(entity_type, fields, tenant=tenant_for(self.transport))
        return MustAwait(self._remember(item), "memory.remember", entity_type=entity_type)

    async def _remember(self, item: Produced) -> str:
        payload = remembered_payload(item)
        stored = await self.transport.store(
            payload.entities, idempotency_key=payload.idempotency_key
        )
        try:
            return stored.entity_id(0)
        except IndexError:
            return item.entity_id

    async def history(
        self, limit: int | None = DEFAULT_HISTORY_TURNS, *, before: str | None = None
    ) -> tuple[HistoryTurn, ...]:
        """The conversation's last ``limit`` turns (``None``: all), oldest first.

        ``before``: only turns before this turn id (a turn id the conversation does not hold
        counts as after every turn). Each :class:`HistoryTurn` holds the exact texts, the
        status from the turn record (``completed``, ``abandoned`` with its partial reply,
        ``open``) and the entity ids each message REFERS_TO; revisions and replays show once,
        with their latest text. Unlike ``t.history``, errors propagate. On the embedded
        store and the dev server the cost does not grow with the conversation's length; on
        a real Neotoma server it reads the whole conversation (see
        ``neotoma_agent._recall.history``). A conversation that does not exist has no history
        (``()``)::

            for h in await memory.history(limit=20):
                print(h.turn_number, h.status, h.user, h.reply)
        """
        await identify(self.transport)
        return await read_history(self.transport, self.conversation_id, limit=limit, before=before)

    async def forget(self) -> Forgotten:
        """Forget this conversation: soft-delete it as Neotoma's ``/delete_entity`` does.

        Writes a deletion observation (``_deleted: true`` at ``source_priority`` 1000) on
        the conversation entity, its messages, turn records and tool calls, and on every
        edge touching them; entities it only refers to stay. Afterwards ``history()``,
        ``t.history``, ``show``, ``export`` and the web view do not see it, on every
        backend. Nothing is erased: the returned :class:`~neotoma_agent.Forgotten` record
        undoes it with :meth:`restore`; to erase the bytes of an embedded store, pass it to
        :func:`~neotoma_agent.purge_forgotten`. A conversation that is not stored (or is
        forgotten already) gives an empty record::

            forgotten = await memory.forget()
            await memory.restore(forgotten)   # changed your mind
        """
        return await forget_conversation(self.transport, self.conversation_id)

    async def restore(self, forgotten: Forgotten) -> None:
        """Undo :meth:`forget`: the entities and edges ``forgotten`` names are readable again."""
        await restore_conversation(self.transport, forgotten)

    async def forget_entity(self, entity_id: str) -> EntityDeletion:
        """Delete one entity (a person, a company, a note) as Neotoma's ``/delete_entity``
        does: a deletion observation, so that no lookup, retrieval, search, context block,
        ``show`` or web view finds it any more, on every backend. Its observations and its
        edges stay (a message still REFERS_TO it; readers skip it), so
        :meth:`restore_entity` undoes it; to erase its bytes from an embedded store, pass
        its id to :func:`~neotoma_agent.purge_entities`. A malformed id raises
        :class:`~neotoma_agent.InvalidEntityIdError` before any I/O, an unknown or already
        deleted one :class:`~neotoma_agent.NotFoundError`::

            await memory.forget_entity(maria_id)
            await memory.restore_entity(maria_id)   # changed your mind
        """
        return await forget_entity(self.transport, entity_id)

    async def restore_entity(self, entity_id: str) -> EntityDeletion:
        """Undo :meth:`forget_entity`: the entity is found and read again."""
        return await restore_entity(self.transport, entity_id)

    async def tools(self, turn_id: str) -> tuple[StoredToolCall, ...]:
        """The tool calls stored with turn ``turn_id``, with their arguments and results.

        Ordered by ``invoked_at``; each :class:`~neotoma_agent.StoredToolCall` has the
        snapshot's fields (name, status, duration, entity id) and what the observation
        keeps (``args`` and ``result`` as stored: capped or summarised per the writer's
        settings, ``call_id``, ``error_class``). Two reads, then one per call, concurrently.
        A turn with no calls (or not stored) has none (``()``)::

            for call in await memory.tools(t.turn_id):
                print(call.name, call.status, call.duration_ms, call.args, call.result)
        """
        keys = turn_keys(self.conversation_id, turn_id)
        await identify(self.transport)
        tenant = tenant_for(self.transport)
        record_id = turn_record_entity_id(keys.conversation_id, keys.turn_id, tenant)
        return await read_tool_details(self.transport, record_id)

    async def search(
        self, query: str, limit: int = 10, conversation_id: str | None = None
    ) -> SearchResult:
        """Search what was said: every stored message, and the text fields of the entities.

        ``query`` is plain text, never a query language: whole words, case and accents
        ignored, every word must be there; ``"..."`` marks a phrase. Hits come best first
        (BM25, each word counted once: the shorter text first; a hit's ``score`` is that
        BM25, comparable within one search only), at most ``limit`` (1–100), each a
        :class:`~neotoma_agent.SearchHit` (``conversation_id``, ``turn_id``, ``role``,
        ``text``, ``message_id``, ``score``). ``conversation_id=None`` searches every
        conversation of the store (and the entities); pass one (``memory.conversation_id``)
        for its messages only. Forgotten conversations are never found. An empty or blank
        query raises :class:`~neotoma_agent.EmptySearchQueryError` before any I/O::

            for hit in (await memory.search('"rotate the certificates"')).hits:
                print(hit.conversation_id, hit.turn_id, hit.role, hit.text)

        The embedded store and the dev server keep a full-text index; a real Neotoma
        server is searched through its own reads (``SearchResult.partial`` says when
        those could not look at everything; see the search guide).
        """
        return await search_store(
            self.transport, query, limit=limit, conversation_id=conversation_id
        )

    async def retrieve(self, text: str) -> Retrieved:
        """Bounded retrieval for ``text`` alone (a turn's enter phase also ranks the
        conversation's recent entities, which this does not read)."""
        return await self._phases.retrieve(check_text("text", text))

    async def open_turn(self, user_message: str, **options: Unpack[TurnOptions]) -> OpenTurn:
        """The enter phase alone: retrieval and the user store.

        Finish the turn with ``close_turn`` (or ``abandon_turn``): until then this memory keeps
        the :class:`OpenTurn` so that the closing store can write the user message's edges
        and the tool calls recorded on it (:meth:`OpenTurn.record_tool`). The options are
        :meth:`turn`'s.
        """
        prompt = self._prepare("open_turn", user_message, options)
        keys, user_message, turn_number = prompt.keys, prompt.user_message, prompt.turn_number
        with self._explicit(prompt, OPEN_TURN_SPAN):
            attempt = EnterAttempt()
            try:
                opened, retrieved, history = await self._phases.enter(prompt, attempt)
            except BaseException:
                if attempt.closed:
                    finish_attempt(attempt, 0.0)  # logs what the failed enter left stored
                raise
        handle = OpenTurn(
            conversation_id=self.conversation_id,
            turn_id=keys.turn_id,
            turn_key=keys.user_turn_key,
            user_message=user_message,
            user_message_id=opened.user_message_id,
            conversation_entity_id=opened.conversation_entity_id,
            retrieved=retrieved.entities,
            retrieval=retrieved.stats,
            revision=keys.revision,
            turn_number=turn_number,
            replayed=opened.replayed,
            opened=opened,
            history=history,
            model=prompt.model,
            tenant=tenant_for(self.transport),
        )
        self._open_turns[keys.turn_id] = handle
        return handle

    async def close_turn(
        self,
        turn_id: str | OpenTurn,
        assistant_message: str,
        **options: Unpack[EndOptions],
    ) -> TurnResult:
        """The closing phase of an open turn: store the exact reply (one store call).

        ``turn_id`` is the id (or the :class:`OpenTurn`) from ``open_turn``. The reply
        REFERS_TO the retrieved entities, ``refers_to`` and the ``produced`` entities
        (from :meth:`OpenTurn.produce`), which the same store writes, as it writes the tool
        calls (those recorded on the :class:`OpenTurn`, and ``tools``: :class:`ToolCall`
        records, e.g. made in another process; a repeated call is written once). A turn
        opened by another process is closed too: pass ``retrieved_ids`` (and
        ``user_message_id`` if known) so the user message's edges are written. ``model``
        names the model, when ``open_turn`` did not. Left out, ``refers_to``, ``produced``
        and ``tools`` are empty and the other options ``None``. Raises
        :class:`TurnCloseError` if the store fails.
        """
        check_options(options, EndOptions, "close_turn")
        how: _How = ("completed", check_text("assistant_message", assistant_message), None)
        return await self._end_turn(turn_id, how, options)

    async def abandon_turn(
        self,
        turn_id: str | OpenTurn,
        *,
        error: BaseException | str,
        partial_reply: str = "",
        **options: Unpack[EndOptions],
    ) -> TurnResult:
        """Record an open turn as abandoned (what ``turn()`` does when the body fails).

        ``error`` is the exception (or its class name); ``partial_reply`` is whatever the
        user was already shown, stored exactly as the assistant message when non-empty.
        ``produced`` entities and the tool calls (recorded on the :class:`OpenTurn`, and
        ``tools``) are still written (they happened), as ``t.remember`` and ``t.tool`` do.
        The other options as :meth:`close_turn` takes them.
        """
        check_options(options, EndOptions, "abandon_turn")
        partial = check_text("partial_reply", partial_reply)
        error_class = error if isinstance(error, str) else error_class_name(error)
        how: _How = ("abandoned", partial, error_class)
        return await self._end_turn(turn_id, how, options)

    @contextlib.contextmanager
    def _explicit(self, prompt: Prompt, span: str) -> Iterator[Explicit]:
        """One call of the explicit API on the turn ``prompt`` opens: its log events bound
        to the turn, its trace."""
        with (
            bound_context(conversation_id=self.conversation_id, turn_id=prompt.keys.turn_id),
            explicit(self.transport, prompt, span) as traced,
        ):
            yield traced

    async def _end_turn(
        self,
        turn: str | OpenTurn,
        how: _How,
        options: EndOptions,
    ) -> TurnResult:
        """``close_turn`` / ``abandon_turn`` once their text is checked: ``how`` the turn
        ends (status, text, error class), what the caller gave (refers_to, produced, tools,
        model: checked here, before any I/O), what a turn opened elsewhere is resumed with;
        then the turn's :class:`Ending`, stored by one shielded store."""
        refers_to = options.get("refers_to", ())
        cited = tuple(validate_entity_id(e.id if isinstance(e, Entity) else e) for e in refers_to)
        products = _check_produced(options.get("produced", ()))
        calls = check_tools(options.get("tools", ()))
        model = _check_model(options.get("model"))
        opened, retrieved, handle = await self._resume(
            turn,
            options.get("user_message_id"),
            options.get("retrieved_ids"),
            options.get("revision"),
            options.get("turn_number"),
        )
        status, text, error_class = how
        ending = Ending(
            opened,
            status,
            text,
            retrieved.ids,
            cited,
            _turn_produced(handle, products),
            _turn_tools(opened, handle, calls),
            error_class,
            model,
        )
        started = time.perf_counter()
        keys = opened.keys
        # The close span quotes no user message: the open span (or the turn's) did.
        traced_turn = Prompt(keys, "", opened.turn_number)
        with self._explicit(traced_turn, CLOSE_TURN_SPAN) as traced:
            completion = await self._phases.shielded(lambda: self._phases.close(ending))
            close_error = completion.error
            result = finish(
                ending,
                retrieved,
                completion.value,
                close_error=close_error,
                close_ms=(time.perf_counter() - started) * 1000,
            )
            traced.done(result, text)
        await raise_deferred(completion, None)
        if close_error is not None:
            raise close_failure(keys, close_error)
        if handle is not None:
            handle._tools.close()  # a call recorded on it now would never be stored
            self._open_turns.pop(handle.turn_id, None)
        return result

    async def record_turn(
        self,
        user_message: str,
        assistant_message: str,
        *,
        refers_to: Sequence[str | Entity] = (),
        retrieve: bool = True,
        tools: Sequence[ToolCall] = (),
        **options: Unpack[TurnOptions],
    ) -> TurnResult:
        """Store a whole finished turn in one store call (transcript import).

        Same graph as ``turn()``: conversation, both messages with their PART_OF and
        REFERS_TO edges (to the entities retrieval finds for the user message, unless
        ``retrieve=False``, and to ``refers_to``), the turn record ``completed``, and one
        ``tool_invocation`` per call in ``tools`` (:class:`ToolCall` records). ``turn_id``,
        ``turn_number``, ``user_extra``, ``revision`` and ``model`` as :meth:`turn` takes them.
        """
        prompt = self._prepare("record_turn", user_message, options)
        keys, user_message, turn_number = prompt.keys, prompt.user_message, prompt.turn_number
        reply = check_text("assistant_message", assistant_message)
        cited = tuple(validate_entity_id(e.id if isinstance(e, Entity) else e) for e in refers_to)
        calls = merge_tools(keys.user_turn_key, check_tools(tools))
        started = time.perf_counter()
        with self._explicit(prompt, TURN_SPAN) as traced:
            await self._phases.identified()  # before tool_entities derives ids
            retrieved = EMPTY_RETRIEVAL
            if retrieve:
                call = self._phases.retrieve(user_message)
                trace = traced.trace
                retrieved = await (call if trace is None else trace.search(call))
            payload = recorded_payload(
                self._phases.conversation,
                keys,
                user_message,
                reply,
                retrieved_ids=retrieved.ids,
                cited_ids=cited,
                turn_number=turn_number,
                user_extra=prompt.user_extra,
                tools=self._phases.tool_entities(keys, calls),
                model=prompt.model,
                started_at=_id_time(keys),
            )
            stored = await self._phases.store(payload, keys, "recorded")
            opened = self._phases.opened(keys, turn_number, stored, payload)
            outcome = CloseOutcome(
                stored_status="completed",
                assistant_message_id=self._phases.assistant_id(stored, payload),
                turn_record_id=opened.turn_record_id,
                replayed=stored.replayed,
                tool_ids=tool_ids(stored, payload),
            )
            ending = Ending(opened, "completed", reply, retrieved.ids, cited, tools=calls)
            result = finish(
                ending, retrieved, outcome, close_ms=(time.perf_counter() - started) * 1000
            )
            traced.done(result, reply)
            return result

    # ------------------------------------------------------------------ phases

    def _prepare(self, function: str, user_message: object, options: TurnOptions) -> Prompt:
        # Everything that can be refused is refused here, before any I/O.
        check_options(options, TurnOptions, function)
        text = check_text("user_message", user_message)
        turn_id = options.get("turn_id")
        # The conversation id was checked when this memory was made (a frozen field): the
        # turn's own ids are checked here.
        keys = TurnKeys(
            self.conversation_id,
            new_turn_id() if turn_id is None else validate_turn_id(turn_id),
            validate_revision(options.get("revision")),
        )
        return Prompt(
            keys,
            text,
            _check_turn_number(options.get("turn_number")),
            validate_user_extra(options.get("user_extra")),
            _check_model(options.get("model")),
        )

    async def _resume(
        self,
        turn: str | OpenTurn,
        user_message_id: str | None,
        retrieved_ids: Sequence[str] | None,
        revision: int | None,
        turn_number: int | None,
    ) -> tuple[Opened, Retrieved, OpenTurn | None]:
        """The state of a turn opened earlier, here or (with less to go on) elsewhere."""
        handle = turn if isinstance(turn, OpenTurn) else self._open_turns.get(turn)
        if handle is not None:
            opened = handle._opened
            if retrieved_ids is None:
                return opened, Retrieved(handle.retrieved, handle.retrieval), handle
            ids = tuple(validate_entity_id(i) for i in retrieved_ids)
            return opened, Retrieved(tuple(_bare(i) for i in ids), handle.retrieval), handle
        assert isinstance(turn, str)  # an OpenTurn always has a handle
        # Everything that can be refused is refused before the lookups below.
        keys = turn_keys(self.conversation_id, turn, revision)
        ids = tuple(validate_entity_id(i) for i in (retrieved_ids or ()))
        turn_number = _check_turn_number(turn_number)
        if user_message_id is not None:
            validate_entity_id(user_message_id)
        elif ids:
            user_message_id = await self._phases.find(keys.user_turn_key, "conversation_message")
        try:
            conversation_entity_id = await self._phases.find(self.conversation_id, "conversation")
        except TransportError:
            # The server is unreachable: use the id a store derives for this conversation,
            # so that the closing store still reaches the transport (and its outbox).
            conversation_entity_id = derive_conversation_entity_id(
                self.conversation_id, tenant_for(self.transport)
            )
        opened = unopened(keys, turn_number)._replace(
            user_message_id=user_message_id or "",
            conversation_entity_id=conversation_entity_id or "",
        )
        return opened, Retrieved(tuple(_bare(i) for i in ids), EMPTY_RETRIEVAL.stats), None


def _id_time(keys: TurnKeys) -> str | None:
    # A recorded turn's start, when its id says it (a UUIDv7); no clock is read.
    ms = turn_id_ms(keys.turn_id)
    return None if ms is None else iso_ms(ms)


def _turn_tools(
    opened: Opened, handle: OpenTurn | None, given: Sequence[ToolCall]
) -> tuple[ToolCall, ...]:
    # The calls recorded on the OpenTurn and those handed to the close, as one set.
    recorded = handle.tools if handle is not None else ()
    return merge_tools(opened.keys.user_turn_key, recorded, given)


def _turn_produced(handle: OpenTurn | None, given: tuple[Produced, ...]) -> tuple[Produced, ...]:
    # What OpenTurn.remember recorded, then what ``produced=`` passed (later wins).
    recorded = tuple(handle._produced.values()) if handle is not None else ()
    return merge_produced((*recorded, *given)) if recorded else given


def _bare(entity_id: str) -> Entity:
    # An id handed over without its entity (a turn opened elsewhere).
    return Entity(id=entity_id, entity_type="", canonical_name=None, snapshot={}, raw={})
