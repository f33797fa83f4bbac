"""``neotoma-agent chat``: a REPL where each line is one stored turn.

The event loop (and the transport) run in a background thread through an anyio blocking
portal; the main thread only reads lines and waits. So the terminal behaves as usual
(line editing, Ctrl-D for end of input), and Ctrl-C during a reply never lands inside the
library: it cancels the running turn from the outside, which records the turn as abandoned
(keeping the partial reply the user saw), and the loop goes on.

``--agent module:function`` (or ``path/to/file.py:function``) plugs in any agent function
``(user_message, turn) -> reply``: sync (run in a worker thread), async, or an async
generator that streams chunks; see :func:`neotoma_agent.wrap.with_memory`. The default is
:func:`echo_agent`, which streams back the message and cites what retrieval found.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import shlex
import signal
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import anyio
import anyio.from_thread
import attrs

from .. import Entity, HistoryTurn, NeotomaMemory, Turn, TurnResult, TurnState
from ..reads import printable, validate_conversation_id
from ..wrap import AgentStream, MemoryAgent, with_memory
from ._common import USER_OPTION, CLIError, Command, explain, open_transport, option, store_label

__all__ = ["echo_agent", "load_agent", "register"]

#: How many earlier turns each turn reads when --history is not given: NeotomaMemory's own
#: default, read from its public signature so that the two cannot differ.
DEFAULT_HISTORY_TURNS: int = inspect.signature(NeotomaMemory).parameters["history_turns"].default

PLATFORM = "neotoma-agent chat"

#: pause between the echo agent's chunks, so that a reply visibly streams
_ECHO_CHUNK_DELAY = 0.02


def entity_label(entity: Entity) -> str:
    """``Acme Corp (company)``."""
    return f"{entity.name} ({entity.entity_type})" if entity.entity_type else entity.name


async def echo_agent(user_message: str, turn: Turn) -> AsyncIterator[str]:
    """The default chat agent: says back what it heard and cites what memory found.

    It streams its reply word by word and cites every linked entity, so each turn shows
    the whole protocol (retrieval, a streamed reply, REFERS_TO edges) without any LLM.
    """
    named = turn.linked
    if named:
        turn.cite(*named)
        found = ", ".join(entity_label(e) for e in named)
        text = f'You said: "{user_message}". In memory I found: {found}.'
    else:
        text = f'You said: "{user_message}". I found nothing in memory about it yet.'
    for chunk in re.findall(r"\S+\s*", text):
        yield chunk
        await anyio.sleep(_ECHO_CHUNK_DELAY)


def load_agent(spec: str) -> Callable[..., Any]:
    """The function ``module:function`` (or ``path/to/file.py:function``) names.

    A module is imported with the current directory on ``sys.path``, as ``python -m``
    would; the function part may be dotted (``module:Class.method``).
    """
    module_name, sep, attr_path = spec.rpartition(":")
    if not sep or not module_name or not attr_path:
        raise CLIError(
            f"--agent must be module:function, got {spec!r}",
            "e.g. --agent my_agent:reply, or --agent path/to/agent.py:reply",
        )
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        module = _import_file(Path(module_name))
    else:
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise CLIError(
                    f"cannot import {module_name!r} for --agent: no such module",
                    "run from the directory that holds it, or pass a file: "
                    "--agent path/to/agent.py:function",
                ) from exc
            raise _import_failed(module_name, exc) from exc
        except Exception as exc:
            raise _import_failed(module_name, exc) from exc
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CLIError(
                f"{module_name!r} has no {attr_path!r} for --agent",
                f"define `def {attr_path}(user_message, turn)` there, or name another function",
            ) from None
    if not callable(target):
        raise CLIError(f"--agent {spec!r} is not callable ({type(target).__name__})")
    return target  # type: ignore[no-any-return]


def _import_failed(name: str, exc: BaseException) -> CLIError:
    return CLIError(
        f"importing {name!r} for --agent failed: {type(exc).__name__}: {exc}",
        "--log-level debug shows the traceback",
    )


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise CLIError(f"cannot load --agent from {path}: no such file")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot load --agent from {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, so that dataclasses and pickling inside it work.
    sys.modules.setdefault(path.stem, module)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise _import_failed(str(path), exc) from exc
    return module


@attrs.define
class _TurnRun:
    """One turn in flight, shared by the loop thread and the main thread."""

    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    error: Exception | None = None
    cancelled: bool = False

    async def cancel(self) -> None:
        # Runs on the event loop thread (sent there by the main thread's SIGINT handler).
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()


class _Chat:
    def __init__(self, agent: MemoryAgent, out: TextIO, *, tracebacks: bool = False) -> None:
        self.agent = agent
        self.out = out
        self.stored = 0
        #: print the agent's traceback to stderr when it fails (``--log-level debug``)
        self.tracebacks = tracebacks

    def write(self, text: str) -> None:
        # Everything here is stored text (entity names, turn ids) or a model's reply, and
        # a reply can hold whatever the model was steered into writing: escape controls.
        self.out.write(printable(text))
        self.out.flush()

    async def turn(self, line: str, run: _TurnRun) -> None:
        stream = self.agent.stream(line)
        started_reply = False
        with anyio.CancelScope() as scope:
            run.scope = scope
            if run.cancel_requested:
                scope.cancel()
            try:
                async with stream:
                    earlier = stream.turn.history
                    if earlier:
                        # Which earlier turns the agent was given (oldest first).
                        turns = ", ".join(_history_label(h) for h in earlier)
                        self.write(f"  history: {turns}\n")
                    found = stream.turn.linked
                    if found:
                        self.write(f"  memory: {', '.join(entity_label(e) for e in found)}\n")
                    else:
                        self.write("  memory: nothing found for this message\n")
                    self.write("agent> ")
                    started_reply = True
                    shown = 0
                    async for chunk in stream:
                        self.write(chunk)
                        shown += len(chunk)
                    # A sync or async agent returns its reply whole, without chunks.
                    self.write(stream.reply[shown:])
            except Exception as exc:
                run.error = exc
        run.cancelled = scope.cancelled_caught
        if started_reply:
            self.write("\n")
        self._footer(stream, run)
        if self.tracebacks and run.error is not None:
            # The footer says what failed in one line; debugging the agent needs where.
            traceback.print_exception(run.error, file=sys.stderr)

    def _footer(self, stream: AgentStream, run: _TurnRun) -> None:
        turn = stream.turn
        result: TurnResult | None = None
        if turn.state in (TurnState.COMPLETED, TurnState.ABANDONED, TurnState.FAILED):
            try:
                result = turn.result
            except Exception:
                result = None
        if result is not None and result.status is TurnState.COMPLETED:
            self.stored += 1
            refs = len(set(result.retrieved_ids) | set(result.cited_ids))
            self.write(
                f"  [stored turn {result.turn_id}: reply refers to "
                f"{refs} entit{'y' if refs == 1 else 'ies'}{_lookup_trouble(result)}]\n"
            )
            return
        if result is not None and result.status is TurnState.ABANDONED:
            self.stored += 1
            why = "stopped" if run.cancelled else f"agent failed ({_describe(run.error)})"
            kept = (
                f"the partial reply ({result.reply_chars} characters) is kept"
                if result.reply_chars
                else "no reply had been shown"
            )
            self.write(f"  [{why}: turn recorded as abandoned; {kept}]\n")
            return
        if run.cancelled:
            self.write("  [stopped before the agent replied]\n")
            return
        error = run.error
        explained = explain(error) if error is not None else None
        message = explained.message if explained is not None else _describe(error)
        self.write(f"  [not stored: {message}]\n")


def _history_label(turn: HistoryTurn) -> str:
    """``turn 3`` (or the turn id), marked when it did not complete."""
    name = f"turn {turn.turn_number}" if turn.turn_number is not None else turn.turn_id
    return name if turn.status == "completed" else f"{name} ({turn.status})"


def _lookup_trouble(result: TurnResult) -> str:
    # Retrieval never fails a turn; a lookup that failed or timed out is only skipped, so
    # say so here (the log has the details at WARNING).
    stats = result.retrieval
    trouble = stats.failures + stats.timeouts
    return f"; {trouble} lookup(s) failed or timed out and were skipped" if trouble else ""


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "unknown error"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _wait_for_turn(portal: anyio.from_thread.BlockingPortal, chat: _Chat, line: str) -> None:
    """Run one turn on the loop thread; Ctrl-C meanwhile cancels it instead of the process."""
    run = _TurnRun()
    future = portal.start_task_soon(chat.turn, line, run)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        # A second Ctrl-C changes nothing: the abandoned store is already on its way, and
        # it is bounded by close_timeout.
        if not run.cancel_requested:
            run.cancel_requested = True
            portal.start_task_soon(run.cancel)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with _no_control_echo():
            # Wake up now and then: a signal that lands just before a blocking wait would
            # otherwise only be handled when the turn is over.
            while not concurrent.futures.wait([future], timeout=0.1).done:
                pass
        future.result()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _no_control_echo() -> Iterator[None]:
    """While a reply streams, the terminal does not echo ``^C`` into the middle of it."""
    try:
        import termios
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    if fd is None:
        yield
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # pragma: no cover - not a real terminal after all
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHOCTL
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


@contextlib.contextmanager
def _sigint_for_main_thread_only() -> Iterator[None]:
    """Block SIGINT in the threads started inside the block.

    The kernel hands a process signal to any thread that does not block it; if a worker
    thread took Ctrl-C, the main thread (waiting in ``input()`` or for a turn) would never
    hear of it.
    """
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:  # pragma: no cover - Windows: console Ctrl-C goes to the main thread
        yield
        return
    mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _new_conversation_id() -> str:
    return time.strftime("chat-%Y%m%d-%H%M%S")


def _show_command(args: argparse.Namespace, conversation_id: str) -> str:
    parts = ["neotoma-agent", "show", conversation_id]
    if args.url:
        parts += ["--url", args.url]
    elif args.db:
        parts += ["--db", str(args.db)]
    return shlex.join(parts)


def run(args: argparse.Namespace, *, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Read lines until end of input; 0 on a clean exit."""
    agent_fn = load_agent(args.agent) if args.agent else echo_agent
    conversation_id = args.conversation or _new_conversation_id()
    try:
        validate_conversation_id(conversation_id)
    except ValueError as exc:
        raise CLIError(f"bad --conversation: {exc}") from None
    if args.history < 0:
        raise CLIError(f"bad --history: must be >= 0, got {args.history}")
    out = out or sys.stdout
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    if interactive and stdin is sys.stdin:
        _enable_line_editing()
    where = store_label(args)
    with contextlib.ExitStack() as stack:
        with _sigint_for_main_thread_only():
            # Threads inherit the signal mask of the thread that starts them: the loop
            # thread, and through it the store's and the agents' worker threads.
            portal = stack.enter_context(anyio.from_thread.start_blocking_portal(backend="asyncio"))
        transport = stack.enter_context(portal.wrap_async_context_manager(open_transport(args)))
        memory = NeotomaMemory(
            transport,
            conversation_id=conversation_id,
            platform=PLATFORM,
            history_turns=args.history,
        )
        chat = _Chat(
            with_memory(agent_fn, memory=memory), out, tracebacks=args.log_level == "debug"
        )
        chat.write(
            f"conversation {conversation_id} in {where}, "
            f"agent: {args.agent or 'built-in echo agent'}\n"
            "each line is one turn; Ctrl-C stops a reply, Ctrl-D quits\n"
        )
        _loop(portal, chat, stdin, interactive)
    if chat.stored:
        count = f"{chat.stored} turn{'s' if chat.stored != 1 else ''}"
        out.write(f"stored {count}; read them back with: {_show_command(args, conversation_id)}\n")
    return 0


def _enable_line_editing() -> None:
    # input() edits lines (arrow keys, history across lines) only once readline is loaded;
    # without it, arrow keys arrive as escape sequences and would be stored verbatim.
    with contextlib.suppress(ImportError):  # e.g. Windows without pyreadline
        import readline  # noqa: F401


def _loop(
    portal: anyio.from_thread.BlockingPortal, chat: _Chat, stdin: TextIO, interactive: bool
) -> None:
    while True:
        try:
            line = _read_line(stdin, chat.out, interactive)
        except EOFError:
            chat.write("\n")
            return
        except KeyboardInterrupt:
            chat.write("\n(Ctrl-D quits)\n")
            continue
        if line.strip():
            _wait_for_turn(portal, chat, line)


def _read_line(stdin: TextIO, out: TextIO, interactive: bool) -> str:
    if interactive and stdin is sys.stdin:
        return input("you> ")
    out.write("you> ")
    out.flush()
    line = stdin.readline()
    if not line:
        raise EOFError
    line = line.rstrip("\r\n")
    # Piped input is not echoed by a terminal: echo it, so the transcript reads well.
    out.write(printable(line) + "\n")
    return line


COMMAND = Command(
    "chat",
    help="talk to an agent; each line is one stored turn",
    description="""
        An interactive loop: each line you type is one turn, stored with the entities
        retrieval found for it and the agent's reply. Ctrl-C during a reply stops it (the
        turn is recorded as abandoned, with the partial reply); Ctrl-D quits. Lines can also
        be piped in.
    """,
    run=run,
    default_log_level="error",
    options=(
        USER_OPTION,
        option(
            "--agent",
            metavar="MODULE:FUNCTION",
            help="agent function (user_message, turn) -> reply: sync, async or async generator "
            "(default: a built-in echo agent that cites what it found)",
        ),
        option(
            "--conversation",
            metavar="ID",
            help="conversation id to continue (default: a new chat-<date>-<time> id)",
        ),
        option(
            "--history",
            metavar="N",
            type=int,
            default=DEFAULT_HISTORY_TURNS,
            help="earlier turns of the conversation each turn gives the agent as turn.history "
            f"(default: {DEFAULT_HISTORY_TURNS}; 0: none)",
        ),
    ),
)
register = COMMAND.register
