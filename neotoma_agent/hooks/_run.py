"""One hook event, start to end: read it, record it, deliver what is due, answer.

``neotoma-agent hook HARNESS EVENT`` runs :func:`run_hook` once per event, as a fresh
process. The rules it keeps:

- it never blocks the person: whatever happens it returns an answer (the harness's neutral
  one when nothing better is known), within ``timeout`` seconds; a problem is one line for
  stderr (:attr:`HookOutcome.problem`), never with message content;
- what the event says is recorded in the state file (``_state``) before any store, so a
  store that fails (a killed hook, an unreachable store) is delivered by a later event of
  the session, in order; the idempotency keys make a repeated delivery a replay;
- bad input (empty, not JSON, too big, wrong types, an event it does not know) is reported
  and ignored: nothing is stored, nothing recorded before is touched.

A turn is opened with ``open_turn`` when its prompt arrives (the answer carries
``OpenTurn.context()``), and closed with ``close_turn`` (the reply) or ``abandon_turn``
(no Stop came: the next prompt or the session's end closes it) by whichever process sees
its end, from what the state file kept: the user message id, the retrieved ids and the
tool calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from ._event import NO_STOP, BadInput, HookEvent, Kind, json_object
from ._state import HookState, PendingTurn

if TYPE_CHECKING:
    from ._core import TurnFile

__all__ = [
    "DEFAULT_CONTEXT_CHARS",
    "DEFAULT_TIMEOUT",
    "MAX_INPUT_BYTES",
    "HookOutcome",
    "StoreSpec",
    "harness_module",
    "run_hook",
]

#: the most stdin a hook reads; a bigger input is refused whole (never cut)
MAX_INPUT_BYTES: Final = 32 * 1024 * 1024
#: seconds a hook may take, end to end, before it answers anyway
DEFAULT_TIMEOUT: Final = 10.0
#: the context block's budget (``t.context(max_chars=)``)
DEFAULT_CONTEXT_CHARS: Final = 4000
#: deliveries of one turn that may fail (other than a store away) before it is given up
MAX_ATTEMPTS: Final = 3
#: seconds retrieval may take on a prompt (the person is waiting for the model)
RETRIEVAL_TIMEOUT: Final = 1.5
#: seconds a failure event (Claude Code's Interrupt, StopFailure) waits for the session file
#: to show its turn's end: the harness runs it without waiting for it, at times before it
#: has written the text it streamed (nobody waits for that hook)
FILE_WAIT: Final = 1.0
#: seconds another session's due store waits before a prompt delivers it, and how many
STALE_AFTER: Final = 30.0
STALE_MAX: Final = 20

HARNESSES: Final = ("claude-code", "codex", "cursor")


class Harness(Protocol):
    """What a harness module provides (``claude_code``, ``codex``, ``cursor``)."""

    NAME: str
    EVENTS: tuple[str, ...]

    def parse(self, event: str, payload: Mapping[str, Any]) -> HookEvent: ...

    def answer(self, event: str, context: str | None) -> dict[str, Any] | None: ...

    def settings_path(self, scope: str, project: Path) -> Path: ...


def harness_module(name: str) -> Harness:
    """The module of harness ``name`` (``ValueError`` for one we do not know)."""
    if name == "claude-code":
        from . import claude_code as module
    elif name == "codex":
        from . import codex as module  # type: ignore[no-redef]
    elif name == "cursor":
        from . import cursor as module  # type: ignore[no-redef]
    else:
        raise ValueError(f"unknown harness {name!r} (known: {', '.join(HARNESSES)})")
    return module


# Named tuples, not attrs classes: a hook process builds each class it imports, and an
# event that only appends to the state file should not pay for attrs.


class StoreSpec(NamedTuple):
    """Where turns go: an embedded store file, or a Neotoma server (with an outbox file)."""

    db: Path | None = None
    url: str | None = None
    token: str | None = None
    #: the outbox for closing stores a server could not take (``url`` only)
    outbox: Path | None = None
    #: the user whose memory the turns are (``hook --user``); ``None``: the default user
    user: str | None = None

    def __repr__(self) -> str:
        # Never the token, nor the user id.
        return f"StoreSpec(db={self.db!r}, url={self.url!r}, outbox={self.outbox!r})"


class HookOutcome(NamedTuple):
    """What the command prints: ``stdout`` (JSON text or ``None``) and ``problem`` (one line)."""

    stdout: str | None
    problem: str | None = None


class _Refused(Exception):
    """A store the store refuses for good (bad content): dropped, never retried."""


def run_hook(
    harness: str,
    event: str,
    raw: bytes,
    *,
    store: StoreSpec,
    state_path: Path,
    context_chars: int = DEFAULT_CONTEXT_CHARS,
    timeout: float = DEFAULT_TIMEOUT,
) -> HookOutcome:
    """Handle one hook input ``raw`` (stdin's bytes) for ``harness`` and ``event``.

    Never raises for anything the input, the state or the store does: the outcome says what
    to print and what went wrong.
    """
    module = harness_module(harness)
    neutral = _dump(module.answer(event, None))
    try:
        parsed = _read(module, event, raw)
    except BadInput as exc:
        _note(state_path, harness, event, problem=True)
        return HookOutcome(neutral, f"input ignored: {exc}")
    except Exception as exc:  # any input at all is answered (exit 0), whatever it holds
        _note(state_path, harness, event, problem=True)
        # The class alone: an error raised on the input's values may quote them.
        return HookOutcome(neutral, f"input ignored: {type(exc).__name__}")
    try:
        return _handle(module, event, parsed, store, state_path, context_chars, timeout)
    except Exception as exc:  # the hook must answer whatever broke
        return HookOutcome(neutral, f"failed: {_describe(exc)}")


def _read(module: Harness, event: str, raw: bytes) -> HookEvent:
    if event not in module.EVENTS:
        raise BadInput(f"event {event!r} is not one neotoma-agent handles for {module.NAME}")
    if len(raw) > MAX_INPUT_BYTES:
        raise BadInput(f"input is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    if not raw.strip():
        raise BadInput("stdin is empty")
    try:
        payload = json_object(raw)
    except ValueError as exc:
        raise BadInput(f"stdin is {exc}") from None
    return module.parse(event, payload)


def _note(state_path: Path, harness: str, event: str, *, problem: bool) -> None:
    try:
        with HookState(state_path) as state:
            state.fired(harness, event, problem=problem)
    except (OSError, sqlite3.Error):
        pass  # status is a convenience: never a reason to fail the hook


def _dump(answer: dict[str, Any] | None) -> str | None:
    return None if answer is None else json.dumps(answer, ensure_ascii=False)


def _describe(exc: BaseException) -> str:
    # An error the store answered with by class, status and code: its message is the
    # server's text. Else a class name and the library's own message (which never quotes
    # content or tokens).
    from neotoma_agent.exceptions import APIError, error_label

    if isinstance(exc, APIError):
        return error_label(exc)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _handle(
    module: Harness,
    event_name: str,
    event: HookEvent,
    store: StoreSpec,
    state_path: Path,
    context_chars: int,
    budget: float,
) -> HookOutcome:
    neutral = _dump(module.answer(event_name, None))
    with HookState(state_path) as state:
        state.fired(module.NAME, event_name)
        conv = event.conversation_id
        turn, problem = _record(module, event, state, budget)
        if problem is not None:
            return HookOutcome(neutral, problem)
        batches = [(conv, state.due(conv))]
        if event.kind is Kind.PROMPT:
            # A prompt loads the store anyway: it also delivers what other sessions left
            # (their last hook killed as the harness exited: no later event of theirs).
            stale = state.stale(module.NAME, besides=conv, idle=STALE_AFTER, limit=STALE_MAX)
            for pending in stale:
                if batches[-1][0] != pending.conversation_id:
                    batches.append((pending.conversation_id, []))
                batches[-1][1].append(pending)
        context: str | None = None
        failure: str | None = None
        if _here(store, batches):
            # Openings and closing stores on a store file (a prompt, a Stop, a session's
            # end): done here, in this thread, by the turn machine's synchronous driver.
            failure = _deliver_here(module.NAME, batches, state, store, budget, context_chars)
        elif any(rows for _, rows in batches) or _outbox_waiting(store):
            # Only now the event loop and the store are loaded: an event with nothing to
            # deliver (most tool uses) costs a state write and no more.
            import anyio

            failure = anyio.run(_deliver, budget, module.NAME, batches, state, store, context_chars)
        if turn is not None and event.kind is Kind.PROMPT:
            row = state.get(conv, turn)
            context = None if row is None else row.context
        elif turn is not None and event.kind is Kind.TOOL and module.NAME == "cursor":
            # Cursor takes no context with the prompt: the turn's first tool use carries it.
            context = state.take_context(conv, turn)
        if context_chars <= 0:
            context = None
        return HookOutcome(_dump(module.answer(event_name, context or None)), failure)


def _record(
    module: Harness, event: HookEvent, state: HookState, budget: float
) -> tuple[str | None, str | None]:
    """Write what the event says into the state; the turn it concerns, or a problem."""
    conv = event.conversation_id
    if event.kind is Kind.PROMPT:
        assert event.prompt is not None
        turn = event.turn_id or _new_turn_id()
        abandoned = state.prompt(
            conv,
            turn,
            module.NAME,
            event.prompt,
            model=event.model,
            abandon_others_as=NO_STOP,
        )
        _read_ends(module.NAME, event, abandoned, state)
        return turn, None
    if event.kind is Kind.SESSION_END:
        abandoned = state.end_session(conv, event.error_class or "SessionEnded")
        _read_ends(module.NAME, event, abandoned, state)
        return None, None
    if event.kind is Kind.NOTHING:
        return None, None
    known = event.turn_id or state.latest_turn(conv)
    if known is None or not state.knows(conv, known):
        # Hooks installed mid-turn, or the prompt's input was refused: no user message to
        # pair with, so nothing is stored (half a turn would be wrong).
        return None, "ignored: no prompt was recorded for this turn"
    turn = known
    if event.kind is Kind.TOOL:
        assert event.tool is not None
        key = event.tool.get("call_id") or f"{event.tool['name']}@{event.tool['invoked_at']}"
        state.add_tool(conv, turn, str(key), event.tool)
    elif event.kind is Kind.REPLY:
        state.reply(conv, turn, event.reply or "")
    elif event.kind is Kind.STOP:
        state.end(conv, turn, "completed", reply=event.reply)
    elif event.kind is Kind.FAILED and state.end(
        conv, turn, "abandoned", reply=event.reply, error_class=event.error_class
    ):
        # Abandoned now (an ending recorded before, e.g. by the next prompt, stands).
        wait = min(FILE_WAIT, budget / 4)
        _read_ends(module.NAME, event, [turn], state, failed=True, wait=wait)
    return turn, None


def _read_ends(
    harness: str,
    event: HookEvent,
    turns: list[str],
    state: HookState,
    *,
    failed: bool = False,
    wait: float = 0.0,
) -> None:
    """Turns just abandoned take what the harness's session file says of their end, as
    ``import --from`` reads it (one answer on both paths): the partial reply the person saw
    and why it ended (``Interrupted``, the API error); a turn abandoned with no word from
    the harness (a session's end, the next prompt) that the file shows completed takes
    its reply (its Stop was lost). ``failed``: the harness said the turn failed (an
    interrupt, an API error): the file is read again for up to ``wait`` seconds until it
    shows the end; one that does not yet gives only the text streamed so far.
    Best-effort: a file that cannot be read changes nothing."""
    if not turns or not event.transcript:
        return  # most prompts: nothing was left unended
    from ._backfill import BACKFILL_SOURCES, read_turns
    from ._transcript import ReadCounts

    if harness not in BACKFILL_SOURCES:
        return
    conv = event.conversation_id
    path = Path(event.transcript)
    deadline = time.monotonic() + wait
    try:
        while True:
            told = {}
            if path.is_file():  # else gone, or not a file (a pipe would never end)
                told = {
                    t.turn_id: t
                    for t in read_turns(harness, path, ReadCounts())
                    if t.conversation_id == conv and t.turn_id in turns
                }
            ended = all(t in told and told[t].ending == "abandoned" for t in turns)
            if not failed or ended or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    except Exception:  # unreadable, or not the harness's file: they stay as abandoned
        return
    for each in told.values():
        if each.ending == "completed" and not failed:
            state.end(conv, each.turn_id, "completed", reply=each.reply)
        else:
            why = None if each.ending == "completed" else each.error_class
            state.explain(conv, each.turn_id, reply=each.reply, error_class=why)


def _new_turn_id() -> str:
    import uuid  # a harness build without turn ids: rare, so not paid by every hook

    return uuid.uuid4().hex


def _here(spec: StoreSpec, batches: list[tuple[str, list[PendingTurn]]]) -> bool:
    """Whether something is due on a store file (``_embedded`` does it all: openings,
    closing stores, and a turn to open and close in one go)."""
    # A user's turns go through the store's scoped view (the engine): the direct writer
    # knows the default user only.
    if spec.url or spec.db is None or spec.user is not None or os.environ.get(_ENGINE_ENV):
        return False
    return any(due for _, due in batches)


#: set (to anything) to deliver every store through the turn engine, as before
#: ``_embedded`` existed: tests compare the stores both ways write
_ENGINE_ENV: Final = "NEOTOMA_AGENT_HOOK_ENGINE"


def _deliver_here(
    harness: str,
    batches: list[tuple[str, list[PendingTurn]]],
    state: HookState,
    spec: StoreSpec,
    budget: float,
    context_chars: int,
) -> str | None:
    """:func:`_deliver` for what :func:`_here` accepts, on the store file, synchronously.

    The store file's lock is waited for at most ``budget`` seconds in all (each store
    waits what is left of it): a store locked longer is kept for a later event, as a store
    that does not answer in time is.
    """
    from ._core import turn_file
    from ._embedded import close

    assert spec.db is not None
    first: str | None = None
    with turn_file(os.fspath(spec.db), busy_timeout=budget) as file:
        # Opened before any store, as the engine opens its store: a file that cannot be
        # opened (not a store) fails the event, and is no failed delivery of a turn.
        file.open()
        for conv, due in batches:
            left_out = 0
            problem: str | None = None
            for row in due:
                try:
                    if row.phase == "pending":
                        _open_here(file, harness, row, state, context_chars)
                        # Ended too (opened and closed in one go): the close needs the
                        # ids the opening kept.
                        row = state.get(conv, row.turn_id) or row
                    if row.ending is None:
                        continue
                    tools, refused = _tool_calls(state.tools(conv, row.turn_id))
                    close(file, harness, row, tools)
                    state.closed(conv, row.turn_id, row.ending)
                except Exception as exc:
                    problem = _failed(_refusal(exc), state, row)
                    break
                left_out += refused
            first = first or problem or _left_out(left_out)
            if problem is not None:
                break  # the store failed: the next sessions wait for a later event
    return first


def _open_here(
    file: TurnFile, harness: str, row: PendingTurn, state: HookState, context_chars: int
) -> None:
    """Open ``row``'s turn on the store file; keep what its close needs, and its context."""
    from ._embedded_open import open_turn

    opened = open_turn(file, harness, row, context_chars)
    state.opened(
        row.conversation_id,
        row.turn_id,
        user_message_id=opened.user_message_id,
        retrieved_ids=opened.retrieved_ids,
        context=opened.context,
    )


async def _deliver(
    budget: float,
    harness: str,
    batches: list[tuple[str, list[PendingTurn]]],
    state: HookState,
    spec: StoreSpec,
    context_chars: int,
) -> str | None:
    """Deliver each session's due stores in order, within ``budget`` seconds; the problem."""
    import anyio

    with anyio.move_on_after(budget):
        async with _open_store(spec, budget) as transport:
            if spec.url and spec.outbox is not None:
                # Closing stores an earlier event queued go first (the server may be back).
                await transport.flush()
            first: str | None = None
            for conv, due in batches:
                problem, failed = await _deliver_all(
                    transport, harness, conv, due, state, context_chars
                )
                first = first or problem
                if failed:
                    break  # the store failed: the next sessions wait for a later event
        return first
    return f"the store did not answer within {budget:g} s; kept for later"


async def _deliver_all(
    transport: Any,
    harness: str,
    conv: str,
    due: list[PendingTurn],
    state: HookState,
    context_chars: int,
) -> tuple[str | None, bool]:
    # Stops at the first store that fails for now: a session's turns land in order.
    # Returns the problem to report, and whether a store failed.
    from neotoma_agent import NeotomaMemory

    left_out = 0
    if due:
        memory = NeotomaMemory(
            transport,
            conversation_id=conv,
            platform=harness,
            retrieval_timeout=RETRIEVAL_TIMEOUT,
        )
        for row in due:
            try:
                left_out += await _deliver_turn(memory, row, state, context_chars)
            except Exception as exc:
                return _failed(exc, state, row), True
    return _left_out(left_out), False


def _left_out(count: int) -> str | None:
    if count:
        return f"stored; {count} tool call(s) left out: the tool-call API refused them"
    return None


def _failed(exc: Exception, state: HookState, row: PendingTurn) -> str:
    """Record a failed delivery of ``row``; the problem to report."""
    conv = row.conversation_id
    if isinstance(exc, _Refused):
        # Retrying would fail the same way and hold up the session's later turns.
        state.drop(conv, row.turn_id)
        return f"refused by the store, dropped: {exc}"
    # Tried again by the next events. A store that is away (or locked) is waited for as
    # long as it takes; any other failure that repeats is given up rather than hold up the
    # session's later turns.
    failures = state.failed(conv, row.turn_id)
    if not _transient(exc) and failures >= MAX_ATTEMPTS:
        state.drop(conv, row.turn_id)
        return f"store failed {failures} times, dropped: {_describe(exc)}"
    return f"store failed, kept for the next event: {_describe(exc)}"


def _refusal(exc: Exception) -> Exception:
    """``exc`` as :func:`_deliver_turn` sees it: ``_Refused`` for a store refused for good."""
    from neotoma_agent import APIError, IdempotencyMismatchError

    if isinstance(exc, IdempotencyMismatchError):
        # This turn id was stored before with other text (e.g. the same harness turn id
        # sent again with another prompt): the store keeps the first.
        return _Refused(_describe(exc))
    if isinstance(exc, APIError) and not (exc.status >= 500 or exc.status == 429):
        return _Refused(_describe(exc))
    return exc


async def _deliver_turn(memory: Any, row: PendingTurn, state: HookState, context_chars: int) -> int:
    """Deliver what is due of one turn; how many of its tool calls were left out."""
    from neotoma_agent import APIError, IdempotencyMismatchError

    conv, turn = row.conversation_id, row.turn_id
    user_message_id, retrieved_ids = row.user_message_id, row.retrieved_ids
    try:
        if row.phase == "pending":
            opened = await memory.open_turn(row.user_message, turn_id=turn, model=row.model)
            user_message_id, retrieved_ids = opened.user_message_id, opened.retrieved_ids
            state.opened(
                conv,
                turn,
                user_message_id=opened.user_message_id,
                retrieved_ids=opened.retrieved_ids,
                context=opened.context(max_chars=context_chars),
            )
        if row.ending is None:
            return 0
        tools, left_out = _tool_calls(state.tools(conv, turn))
        if row.ending == "completed":
            await memory.close_turn(
                turn,
                row.reply or "",
                user_message_id=user_message_id or None,
                retrieved_ids=retrieved_ids or (),
                tools=tools,
                model=row.model,
            )
        else:
            await memory.abandon_turn(
                turn,
                error=row.error_class or "Abandoned",
                partial_reply=row.reply or "",
                user_message_id=user_message_id or None,
                retrieved_ids=retrieved_ids or (),
                tools=tools,
                model=row.model,
            )
        state.closed(conv, turn, row.ending)
        return left_out
    except (IdempotencyMismatchError, APIError) as exc:
        refusal = _refusal(exc)
        if refusal is exc:
            raise
        raise refusal from None


def _transient(exc: BaseException) -> bool:
    """A failure that waiting cures: the store unreachable, busy, or failing on its side."""
    from neotoma_agent import APIError, TransportError, TurnCloseError

    if isinstance(exc, TurnCloseError) and exc.__cause__ is not None:
        return _transient(exc.__cause__)  # the closing store's own failure
    if isinstance(exc, TransportError | OSError | sqlite3.OperationalError):
        return True
    return isinstance(exc, APIError) and (exc.status >= 500 or exc.status == 429)


def _tool_calls(records: list[dict[str, Any]]) -> tuple[list[Any], int]:
    """The kept calls as the tool-call API's records, checked now; and how many it refused.

    A call the API refuses (a value that is not plain JSON, a name with outer whitespace)
    is left out: the turn and its other calls are stored all the same.
    """
    if not records:
        return [], 0  # most turns: the tool-call API is not loaded
    from neotoma_agent import ToolCall, ValidationError

    calls, refused = [], 0
    for record in records:
        try:
            calls.append(ToolCall.from_json(record))
        except (TypeError, ValueError, ValidationError):
            refused += 1
    return calls, refused


def _outbox_waiting(spec: StoreSpec) -> bool:
    """Whether closing stores wait in the outbox (then this event tries to deliver them)."""
    if not spec.url or spec.outbox is None or not spec.outbox.exists():
        return False
    from neotoma_agent import outbox_status

    try:
        return outbox_status(spec.outbox).queued > 0
    except (OSError, sqlite3.Error):
        return False


def _open_store(spec: StoreSpec, budget: float) -> Any:
    if spec.url:
        from neotoma_agent import HttpTransport, RetryPolicy

        # Each call gets at most half the hook's budget: a store cancelled at the budget
        # still makes its closing store (the engine shields it), and that one must end
        # within the budget too; a server that hangs would otherwise keep the person
        # waiting the transport's own timeout past --timeout.
        call = max(min(4.0, budget / 2), 0.05)
        settings: dict[str, Any] = {
            "token": spec.token,
            "timeout": min(5.0, call),
            "connect_timeout": min(1.0, call),
            # A person is waiting: one quick retry, then the outbox (closing stores) or the
            # state file (the rest) keeps the store for a later event.
            "retry": RetryPolicy(attempts=2, timeout=call, wait_initial=0.1, wait_max=0.3),
        }
        if spec.user is None:
            return _with_outbox(HttpTransport(spec.url, **settings), spec.outbox)
        return _http_for_user(spec.url, spec.user, spec.outbox, settings)
    from neotoma_agent import EmbeddedStore

    assert spec.db is not None
    # Each store waits at most half the budget for another process's lock on the file,
    # for the reason an HTTP call gets half of it above: the shielded closing store after
    # a cancel at the budget waits too.
    store = EmbeddedStore.open(spec.db, busy_timeout=max(min(10.0, budget / 2), 0.05))
    return store if spec.user is None else _scoped(store, spec.user)


@contextlib.asynccontextmanager
async def _http_for_user(
    url: str, user: str, outbox: Path | None, settings: dict[str, Any]
) -> AsyncIterator[Any]:
    """A transport acting for ``user`` on the server at ``url``, deriving entity ids as the
    server says it does (its ``/health``)."""
    from neotoma_agent import LOCAL_USER_ID, HttpTransport
    from neotoma_agent.transport.http import tenant_scoped

    async with HttpTransport(url, **settings) as probe:
        scoped = tenant_scoped(await probe.health()) and user != LOCAL_USER_ID
    http = HttpTransport(url, user_id=user, tenant_scoped_ids=scoped, **settings)
    async with _with_outbox(http, outbox) as transport:
        yield transport


def _with_outbox(http: Any, outbox: Path | None) -> Any:
    """``http``, behind the outbox file ``outbox`` when there is one (delivered by the
    events, not in the background: a hook process ends with its event)."""
    if outbox is None:
        return http
    from neotoma_agent import OutboxTransport

    return OutboxTransport(http, outbox, background=False)


@contextlib.asynccontextmanager
async def _scoped(store: Any, user: str) -> AsyncIterator[Any]:
    """``store`` open for the block, as ``user`` sees it (its ``for_user`` view)."""
    async with store:
        yield store.for_user(user)
