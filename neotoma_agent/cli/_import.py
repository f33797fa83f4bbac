"""``neotoma-agent import FILE.jsonl``: store a transcript, one finished turn per line.

(A file whose first line is a backup's header, what ``export`` writes, is restored whole
instead: :mod:`._backup`.)

Each line is a JSON object::

    {"conversation_id": "support-42", "turn_id": "m-1001", "turn_number": 1,
     "user": "Where is my Acme Corp order?", "assistant": "It shipped on Monday.",
     "refers_to": ["ent_af939bedafbd1838b259772a"]}

``conversation_id``, ``user`` and ``assistant`` are required; ``turn_id``, ``turn_number``
and ``refers_to`` (entity ids the reply refers to) are optional; other keys are ignored
(and listed once). Let ``n`` be a line's number in the file (1 for the first line; blank
lines are not turns but are counted, like every other line): ``turn_id`` defaults to
``import-<n>`` and ``turn_number`` (which orders the transcript) to ``n``. So importing
the same file again maps every line to the same turn, and fixing, blanking or adding a
``turn_id`` to one line never changes the ids of the others (inserting or deleting lines
does: to drop a line, blank it). Give both explicitly when a conversation is spread over
several files.

Every turn is written as ``NeotomaMemory.record_turn`` writes it (one store: both messages,
the turn record and every edge, under the turn's idempotency key), so a second run replays
each line and writes nothing; the summary says so. The file is read as a stream, in
batches of 256 lines, two batches in flight at most (memory stays flat whatever the file's
size); each batch goes through :func:`neotoma_agent.batch.record_batch`: on the embedded
store one read finds the turns already stored and one job stores the others (each in its
own savepoint, all committed together), elsewhere ``--concurrency`` turns are written at
once. A malformed line is reported with its number and skipped; ``--strict`` stops at it
instead, before anything from it (or any later line) is written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import anyio
import anyio.abc
import attrs

from .. import NeotomaMemory, Transport
from ..batch import BatchOutcome, BatchStore, BatchTurn, record_batch
from ..exceptions import (
    APIError,
    AuthenticationError,
    IdempotencyMismatchError,
    RateLimitedError,
    ServerError,
    ValidationError,
)
from ..hooks import BACKFILL_SOURCES
from ..reads import printable, validate_conversation_id, validate_entity_id, validate_turn_id
from ..transport.rest import check_text, json_type
from ._common import (
    USER_OPTION,
    CLIError,
    Command,
    Progress,
    open_transport,
    option,
    plural,
    run_async,
)
from ._core import raise_deferred, run_to_completion

__all__ = ["ImportLine", "ImportStats", "LineError", "parse_line", "register"]

# How long a batch in flight may take to finish after Ctrl-C (so that it is counted).
_WRITE_DEADLINE_S = 60.0
# Lines per batch: a store job of this many turns commits in a fraction of a second, and
# two batches in flight bound what an import holds in memory whatever the file's size.
_BATCH_LINES = 256
# Conversations whose NeotomaMemory is kept between batches.
_MEMORIES = 4096

_KNOWN_KEYS = frozenset(
    {"conversation_id", "turn_id", "turn_number", "user", "assistant", "refers_to"}
)


class LineError(ValueError):
    """A line that is not a turn; the message says why."""


@attrs.frozen
class ImportLine:
    """One valid line: a finished turn to record."""

    line_number: int
    conversation_id: str
    turn_id: str
    turn_number: int
    user: str
    assistant: str
    refers_to: tuple[str, ...]


@attrs.define
class ImportStats:
    """What an import did, line by line."""

    lines: int = 0
    turns: int = 0
    written: int = 0
    replayed: int = 0
    malformed: list[int] = attrs.field(factory=list)
    failed: list[int] = attrs.field(factory=list)
    #: the conversations of the stored turns (written or already there): what the store
    #: holds after the import, not what was read (a Ctrl-C stops between the two)
    conversations: set[str] = attrs.field(factory=set)
    ignored_keys: dict[str, int] = attrs.field(factory=dict)
    stopped_at: int | None = None

    @property
    def done(self) -> int:
        """Lines finished (written, replayed, malformed or failed)."""
        return self.written + self.replayed + len(self.malformed) + len(self.failed)


def _string(obj: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise LineError(f"missing {key!r}")
        return None
    if not isinstance(value, str):
        raise LineError(f"{key!r} must be a string, not {_json_type(value)}")
    return value


def _json_type(value: object) -> str:
    name = json_type(value)
    return name if name == "null" else f"{'an' if name[0] in 'ao' else 'a'} {name}"


def parse_line(raw: bytes, line_number: int, stats: ImportStats) -> ImportLine | None:
    """The turn on one line, ``None`` for a blank line; :class:`LineError` if malformed.

    A line without ``turn_id`` / ``turn_number`` is numbered by ``line_number``, its
    physical line in the file, never by how many other lines parsed: fixing a malformed
    line later must not renumber (and so re-store) the lines after it.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 (byte {exc.start + 1})") from None
    if line_number == 1:
        text = text.removeprefix("\ufeff")
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise LineError("JSON nested too deeply to read") from None
    if not isinstance(obj, dict):
        raise LineError(f"expected a JSON object, got {_json_type(obj)}")
    conversation_id = _string(obj, "conversation_id", required=True)
    assert conversation_id is not None
    try:
        validate_conversation_id(conversation_id)
    except ValueError as exc:
        raise LineError(str(exc)) from None
    for key in obj:
        if key not in _KNOWN_KEYS:
            stats.ignored_keys[key] = stats.ignored_keys.get(key, 0) + 1

    user = _string(obj, "user", required=True)
    assistant = _string(obj, "assistant", required=True)
    assert user is not None
    assert assistant is not None
    try:
        # json.loads lets lone surrogate escapes through; refuse them here, quoting nothing.
        user = check_text("'user'", user)
        assistant = check_text("'assistant'", assistant)
    except ValidationError as exc:
        raise LineError(exc.message) from None
    turn_id = _string(obj, "turn_id", required=False)
    if turn_id is None:
        turn_id = f"import-{line_number}"
    else:
        try:
            validate_turn_id(turn_id)
        except ValueError as exc:
            raise LineError(str(exc)) from None
    turn_number = line_number
    if obj.get("turn_number") is not None:
        value = obj["turn_number"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise LineError(f"'turn_number' must be an integer >= 0, got {value!r}")
        turn_number = value
    refers = obj.get("refers_to")
    refers_to: tuple[str, ...] = ()
    if refers is not None:
        if not isinstance(refers, list):
            raise LineError(f"'refers_to' must be an array of entity ids, not {_json_type(refers)}")
        try:
            refers_to = tuple(validate_entity_id(r) for r in refers)
        except ValueError as exc:
            raise LineError(f"'refers_to': {exc}") from None
    return ImportLine(
        line_number, conversation_id, turn_id, turn_number, user, assistant, refers_to
    )


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(stream, 1):
        yield number, raw.rstrip(b"\r\n")


def _count_lines(path: Path) -> int:
    count = 0
    last = b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _is_fatal(exc: Exception) -> bool:
    # The store cannot take any line now (unreachable, refusing us, overloaded): stop.
    # Anything else the store refused is about this line's turn.
    if isinstance(exc, (AuthenticationError, RateLimitedError, ServerError)):
        return True
    return not isinstance(exc, (APIError, ValueError, TypeError))


def _refusal(item: ImportLine, exc: Exception) -> str:
    if isinstance(exc, IdempotencyMismatchError):
        return (
            f"turn {item.turn_id!r} of conversation {item.conversation_id!r} is already stored "
            "with a different text or turn_number (a line without them is numbered by its "
            "line number in the file); give this line its own turn_id, or fix the file"
        )
    if isinstance(exc, APIError):
        return f"the store refused the turn: {exc.message}"
    return str(exc)


@attrs.define
class _Importer:
    transport: Transport
    concurrency: int = attrs.field(kw_only=True)
    strict: bool = attrs.field(kw_only=True)
    retrieve: bool = attrs.field(kw_only=True)
    progress: Progress = attrs.field(kw_only=True)
    err: TextIO = attrs.field(kw_only=True)
    batch_size: int = attrs.field(default=_BATCH_LINES, kw_only=True)
    stats: ImportStats = attrs.field(init=False, factory=ImportStats)
    fatal: Exception | None = attrs.field(init=False, default=None)
    _memories: dict[str, NeotomaMemory] = attrs.field(init=False, factory=dict)

    def report(self, line_number: int, message: str) -> None:
        self.progress.finish(self.stats.done)
        # The message quotes ids from the file and what the store said: escape controls.
        self.err.write(f"line {line_number}: {printable(message)}\n")
        self.err.flush()

    def memory(self, conversation_id: str) -> NeotomaMemory:
        memory = self._memories.pop(conversation_id, None)
        if memory is None:
            memory = NeotomaMemory(self.transport, conversation_id=conversation_id)
            if len(self._memories) >= _MEMORIES:
                # Memory stays flat whatever the file holds: forget the least recent one.
                del self._memories[next(iter(self._memories))]
        self._memories[conversation_id] = memory
        return memory

    def _stopping(self) -> bool:
        return self.stats.stopped_at is not None or self.fatal is not None

    async def run(self, lines: Iterator[tuple[int, bytes]]) -> None:
        # Bounded work in flight: a batch being stored while the next one is read. A store
        # that takes a batch as one job gets two; any other transport writes one batch at
        # a time, --concurrency turns at once.
        slots = anyio.Semaphore(2 if isinstance(self.transport, BatchStore) else 1)
        async with anyio.create_task_group() as tg:
            batch: list[ImportLine] = []
            for number, raw in lines:
                if self._stopping():
                    break
                self.stats.lines = number
                try:
                    item = parse_line(raw, number, self.stats)
                except LineError as exc:
                    self.stats.malformed.append(number)
                    self.report(number, f"skipped: {exc}" if not self.strict else str(exc))
                    if self.strict:
                        self.stats.stopped_at = number
                    continue
                if item is None:
                    continue
                self.stats.turns += 1
                batch.append(item)
                if len(batch) >= self.batch_size:
                    await self._dispatch(tg, batch, slots)
                    batch = []
            # What was read before a malformed line stopped a --strict import is written;
            # nothing after a refused turn or a fatal error is.
            stop = self.stats.stopped_at
            batch = [item for item in batch if stop is None or item.line_number < stop]
            if batch and self.fatal is None:
                await self._dispatch(tg, batch, slots)

    async def _dispatch(
        self, tg: anyio.abc.TaskGroup, batch: list[ImportLine], slots: anyio.Semaphore
    ) -> None:
        await slots.acquire()
        if self._stopping() and not (
            self.stats.stopped_at is not None and batch[0].line_number < self.stats.stopped_at
        ):
            slots.release()  # a write failed while we waited for a slot
            return
        turns = [
            BatchTurn(
                self.memory(item.conversation_id),
                item.user,
                item.assistant,
                item.turn_id,
                item.turn_number,
                item.refers_to,
            )
            for item in batch
        ]
        tg.start_soon(self._write, batch, turns, slots, tg.cancel_scope)

    async def _write(
        self,
        batch: list[ImportLine],
        turns: list[BatchTurn],
        slots: anyio.Semaphore,
        scope: anyio.CancelScope,
    ) -> None:
        # A batch in flight when the user presses Ctrl-C may commit anyway: let it finish
        # (bounded), so that the summary counts exactly what is stored.
        completion = await run_to_completion(
            lambda: record_batch(
                self.transport, turns, retrieve=self.retrieve, concurrency=self.concurrency
            ),
            _WRITE_DEADLINE_S,
        )
        try:
            if completion.error is not None:
                self._stop(completion.error, scope)
            else:
                assert completion.value is not None
                for item, outcome in zip(batch, completion.value, strict=True):
                    self._count(item, outcome, scope)
            self.progress.update(self.stats.done)
        finally:
            slots.release()
        await raise_deferred(completion, None)

    def _stop(self, exc: Exception, scope: anyio.CancelScope) -> None:
        if self.fatal is None:
            self.fatal = exc
        scope.cancel()

    def _count(self, item: ImportLine, outcome: BatchOutcome, scope: anyio.CancelScope) -> None:
        exc = outcome.error
        if exc is None:
            self.stats.conversations.add(item.conversation_id)
            if outcome.replayed:
                self.stats.replayed += 1
            else:
                self.stats.written += 1
        elif _is_fatal(exc):
            self._stop(exc, scope)
        else:
            self.stats.failed.append(item.line_number)
            self.report(item.line_number, f"not stored: {_refusal(item, exc)}")
            if self.strict and self.stats.stopped_at is None:
                self.stats.stopped_at = item.line_number


def _line_list(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in sorted(numbers)[:10])
    return shown + (", ..." if len(numbers) > 10 else "")


def _summary(stats: ImportStats, source: str, seconds: float, out: TextIO) -> None:
    # The head line counts what is stored (written now or before), never the lines read:
    # an interrupted import has read turns it did not store.
    stored = stats.written + stats.replayed
    rate = f", {stored / seconds:,.0f} turns/s" if seconds > 0 and stored else ""
    out.write(
        f"{source}: {plural(stored, 'turn')} in "
        f"{plural(len(stats.conversations), 'conversation')} ({seconds:.1f} s{rate})\n"
    )
    if stats.written == 0 and stats.replayed and stats.replayed == stats.turns:
        out.write(
            f"nothing new to write: all {plural(stats.replayed, 'turn')} were already stored\n"
        )
    elif stats.replayed:
        were = "was" if stats.replayed == 1 else "were"
        out.write(
            f"stored {plural(stats.written, 'new turn')}; {stats.replayed:,} {were} already "
            "stored (nothing written for them)\n"
        )
    else:
        out.write(f"stored {plural(stats.written, 'new turn')}\n")
    if stats.malformed:
        out.write(
            f"skipped {plural(len(stats.malformed), 'malformed line')}: "
            f"{_line_list(stats.malformed)}\n"
        )
    if stats.failed:
        out.write(
            f"{plural(len(stats.failed), 'line')} not stored (refused by the store): "
            f"{_line_list(stats.failed)}\n"
        )
    if stats.ignored_keys:
        keys = ", ".join(
            f"{k!r} ({plural(n, 'line')})" for k, n in sorted(stats.ignored_keys.items())
        )
        out.write(f"ignored unknown keys: {keys}\n")
    if stats.stopped_at is not None:
        out.write(
            f"stopped at line {stats.stopped_at} (--strict): nothing from it or after it "
            "was written; fix it and run the import again (stored lines are not rewritten)\n"
        )


def run(args: argparse.Namespace) -> int:
    """Import the file; 0 if every line was stored (or already was), else 1."""
    if args.concurrency < 1:
        raise CLIError("--concurrency must be at least 1")
    if args.source:
        from ._hook import run_backfill

        return run_backfill(args)
    if args.file == "-":
        return run_async(_run, args, sys.stdin.buffer, 0, "stdin")
    path = Path(args.file)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not found"
        raise CLIError(f"cannot read {path}: {what}", "pass a .jsonl file, one turn per line")
    with path.open("rb") as stream:
        return run_async(_run, args, stream, _count_lines(path), str(path))


async def _watch_interrupts(work: anyio.CancelScope) -> None:
    """Ctrl-C stops reading and lets the writes in flight finish (``work`` is cancelled);
    another Ctrl-C only says so, so that the summary of what was stored is always printed
    (the wait is bounded by the write deadline)."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if not work.cancel_called:
                work.cancel()
                continue
            sys.stderr.write(
                f"\nneotoma-agent: finishing the writes in flight (at most "
                f"{_WRITE_DEADLINE_S:.0f} s), then the summary of what is stored\n"
            )


async def _run(args: argparse.Namespace, stream: BinaryIO, total: int, source: str) -> int:
    # Ctrl-C is ours until the store is closed and the summary written: a press that found
    # Python's default handler back while the store closed would raise KeyboardInterrupt
    # inside anyio's teardown and leave its worker threads for the exit to wait on forever.
    work = anyio.CancelScope()
    status = 1
    async with anyio.create_task_group() as watchers:
        watchers.start_soon(_watch_interrupts, work)
        try:
            status = await _import(args, stream, total, source, work)
        finally:
            watchers.cancel_scope.cancel()
    return status


def _first_line(lines: Iterator[tuple[int, bytes]]) -> tuple[list[tuple[int, bytes]], bool]:
    """The lines up to the first that is not blank, and whether that one is a backup's
    header (``export`` writes one; a transcript's lines are turns)."""
    from ._backup import is_backup_header

    read: list[tuple[int, bytes]] = []
    for number, raw in lines:
        read.append((number, raw))
        if raw.strip():
            try:
                return read, is_backup_header(json.loads(raw))
            except (ValueError, RecursionError):  # a bad turn line: parse_line says why
                return read, False
    return read, False


async def _restore(
    args: argparse.Namespace,
    lines: Iterator[tuple[int, bytes]],
    source: str,
    work: anyio.CancelScope,
) -> int:
    """Restore a backup ``export`` wrote; print what was written."""
    from ._backup import BackupError, BackupStats, restore_backup

    def decoded() -> Iterator[tuple[int, Mapping[str, Any]]]:
        for number, raw in lines:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                raise CLIError(f"{source}: line {number} is not JSON a backup holds") from None
            if not isinstance(obj, dict):
                raise CLIError(f"{source}: line {number} is not a JSON object")
            yield number, obj

    stats = BackupStats()
    started = time.monotonic()
    async with open_transport(args) as transport:
        try:
            with work:
                await restore_backup(transport, decoded(), stats)
        except BackupError as exc:
            raise CLIError(f"{source}: {exc}") from None
    if work.cancel_called:
        sys.stdout.write(
            f"{source}: interrupted after {stats.observations:,} observations; run the same "
            "import again to finish (what is stored is not rewritten)\n"
        )
        return 130
    seconds = time.monotonic() - started
    sys.stdout.write(f"{source}: restored {stats.note()} ({seconds:.1f} s)\n")
    if stats.replayed:
        sys.stdout.write(f"{stats.replayed:,} observations were already stored\n")
    return 0


async def _import(
    args: argparse.Namespace, stream: BinaryIO, total: int, source: str, work: anyio.CancelScope
) -> int:
    rest = _lines(stream)
    read, backup = _first_line(rest)
    lines = itertools.chain(read, rest)
    if backup:
        return await _restore(args, lines, source, work)
    progress = Progress(total, label="importing", unit="lines")
    started = time.monotonic()
    async with open_transport(args) as transport:
        importer = _Importer(
            transport,
            concurrency=args.concurrency,
            strict=args.strict,
            retrieve=args.retrieve,
            progress=progress,
            err=sys.stderr,
        )
        interrupted = True
        try:
            with work:
                await importer.run(lines)
            interrupted = work.cancel_called
        finally:
            progress.finish(importer.stats.done)
            if importer.fatal is None:
                _summary(importer.stats, source, time.monotonic() - started, sys.stdout)
            if interrupted:
                sys.stdout.write(
                    "interrupted: run the same import again to continue "
                    "(stored turns are not rewritten)\n"
                )
        if interrupted and importer.fatal is None:
            return 130
    stats = importer.stats
    if importer.fatal is not None:
        done = stats.written + stats.replayed
        sys.stderr.write(
            f"import stopped after {plural(done, 'stored turn')}; running it again "
            "continues where it stopped (stored turns are not rewritten)\n"
        )
        raise importer.fatal
    ok = not stats.malformed and not stats.failed and stats.stopped_at is None
    return 0 if ok else 1


COMMAND = Command(
    "import",
    help="restore a backup `export` wrote, or store a transcript (one turn per line)",
    description="""
        Restore a backup `export` wrote (every entity, observation and relationship it
        holds; recognised by its first line), or store a transcript, one finished turn
        per line: {"conversation_id": ...,
        "user": ..., "assistant": ..., optional "turn_id", "turn_number", "refers_to":
        [entity ids]}. Running the same file again writes nothing. A line without turn_id
        is stored as turn import-N, N its line number in the file (blank lines count), so
        fixing a line and importing again stores just that line. A malformed line is
        reported and skipped (or, with --strict, stops the import before anything from it
        is written). Exit status 1 if any line was not stored.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("file", metavar="FILE.jsonl", help="the transcript (- for stdin)"),
        option(
            "--from",
            dest="source",
            choices=BACKFILL_SOURCES,
            default=None,
            help="FILE is a coding agent's session file (or a folder of them), stored with "
            "the ids its hooks use: claude-code reads ~/.claude/projects/*/*.jsonl, codex "
            "~/.codex/sessions/**/rollout-*.jsonl",
        ),
        option(
            "--concurrency",
            type=int,
            default=8,
            metavar="N",
            help="turns written at once over HTTP, and lookups at once on the embedded "
            "store (default 8)",
        ),
        option(
            "--strict",
            action="store_true",
            help="stop at the first malformed line (or refused turn) instead of skipping it",
        ),
        option(
            "--no-retrieve",
            dest="retrieve",
            action="store_false",
            help="do not look up the entities each user message names (faster; only the "
            "refers_to edges are written)",
        ),
    ),
)
register = COMMAND.register
