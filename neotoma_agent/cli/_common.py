"""What every ``neotoma-agent`` subcommand shares: the store it talks to, errors, rendering.

A subcommand module exposes ``register(subparsers)``: a :class:`Command` declares the whole
parser as data (name, help, description, options, the ``run(args) -> int`` it calls) and
its ``register`` adds it. The
global options (``--db``, ``--url``, ``--token``, ``--log-level``, ``--log-json``) are on
every parser; :func:`open_transport` turns them into a transport.

User mistakes (a store path that does not exist, a server that does not answer, a token it
refuses) are raised as, or translated into, :class:`CLIError`: one line and a hint, never a
traceback. Nothing here ever prints the token.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TextIO, TypeGuard, TypeVar

from ._paths import default_db_path, private_parent

if TYPE_CHECKING:
    from .. import Transport

# Every command imports this module (``main`` explains errors with it), the hook command
# as a fresh process per coding-agent event: so the event loop (anyio), the transports,
# sqlite3, attrs and the exceptions are imported where they are used, not here.

__all__ = [
    "USER_OPTION",
    "CLIError",
    "Command",
    "Progress",
    "default_db_path",
    "display_name",
    "explain",
    "given_token",
    "given_user",
    "open_transport",
    "option",
    "print_json",
    "print_report",
    "resolve_token",
    "resolve_url",
    "run_async",
    "store_error",
    "store_label",
]

T = TypeVar("T")
R = TypeVar("R", bound="_Report")


class CLIError(Exception):
    """A user-facing failure: one line of ``message`` and an optional ``hint``."""

    def __init__(self, message: str, hint: str | None = None, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code


class _Report(Protocol):
    def to_json(self) -> Mapping[str, Any]: ...


Runner = Callable[[argparse.Namespace], int] | Callable[[argparse.Namespace], Awaitable[int]]


def _is_async(run: Runner) -> TypeGuard[Callable[..., Awaitable[int]]]:
    code = getattr(run, "__code__", None)
    if code is not None:  # a plain function: read its flag without importing inspect
        return bool(code.co_flags & _CO_COROUTINE)
    import inspect

    return inspect.iscoroutinefunction(run)


#: ``inspect.CO_COROUTINE``: the code flag of an ``async def`` function
_CO_COROUTINE = 0x80


#: one ``parser.add_argument(*flags, **settings)`` call, as data
Option = tuple[tuple[str, ...], Mapping[str, Any]]


def option(*flags: str, **settings: Any) -> Option:
    """An option (or positional argument) of a :class:`Command`, as ``add_argument`` takes it."""
    return flags, settings


#: ``--user USER``, on every command that reads or writes a store: its rows are that user's
USER_OPTION: Option = option(
    "--user",
    metavar="USER",
    help="act for this user only: read and write that user's memory (an id your "
    "application gives its users; default: the store's default user)",
)


def given_user(args: argparse.Namespace) -> str | None:
    """The ``--user`` given, checked (``None``: none); a bad one is a usage error (exit 2)
    whose message never quotes it."""
    user = getattr(args, "user", None)
    if user is None:
        return None
    from .. import check_user_id
    from ..exceptions import InvalidUserIdError

    try:
        return check_user_id(user)
    except InvalidUserIdError as exc:
        raise CLIError(f"bad --user: {exc}", exit_code=2) from None


def plural(n: int, word: str, words: str | None = None) -> str:
    """``n`` and its noun, as the commands print counts: ``1 turn``, ``1,024 turns``."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


@contextlib.contextmanager
def listening(host: str, port: int) -> Iterator[None]:
    """Run a server (``serve``, ``ui``) in the block: a failed bind is a :class:`CLIError`
    saying why; ``stopped`` on stderr once it ends."""
    try:
        yield
    except OSError as exc:
        raise _bind_error(host, port, exc) from None
    print("stopped", file=sys.stderr)


def _bind_error(host: str, port: int, exc: OSError) -> CLIError:
    """What went wrong with the bind, in words: only a port in use suggests another server."""
    import errno  # only a server that failed to start needs them
    import socket

    if isinstance(exc, socket.gaierror) or (exc.errno is not None and exc.errno < 0):
        # getaddrinfo's codes are negative (socket.create_server re-raises them as a plain
        # OSError): os.strerror() would say "Unknown error -2".
        return CLIError(
            f"cannot listen on {host}:{port}: no such host or address",
            "pass an address of this machine, e.g. --host 127.0.0.1",
        )
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        hint = "is another server running there? pass another --port (0 picks a free one)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        hint = f"{host} is not an address of this machine: pass one that is, e.g. 127.0.0.1"
    elif exc.errno == errno.EACCES:
        hint = "ports below 1024 need privileges: pass --port 1024 or above (0 picks one)"
    else:
        hint = "pass another --host or --port"
    return CLIError(f"cannot listen on {host}:{port}: {reason}", hint)


class Command(NamedTuple):
    """A subcommand as data: ``register`` adds its parser and its options, in order.

    ``description`` may be an indented triple-quoted string: ``--help`` refills it anyway.
    A named tuple, not attrs: building an attrs class at import costs a hook process time.
    """

    name: str
    help: str
    description: str
    run: Runner
    options: tuple[Option, ...] = ()
    #: replaces ``warning`` for a command that reports failures itself
    default_log_level: str | None = None

    def __repr__(self) -> str:
        return f"Command({self.name!r})"

    def register(self, subparsers: Any) -> None:
        """Add the subcommand to ``subparsers``: it runs ``run(args)`` (an async ``run``
        through :func:`run_async`)."""
        parser: argparse.ArgumentParser = subparsers.add_parser(
            self.name, help=self.help, description=self.description
        )
        run = self.run
        parser.set_defaults(func=functools.partial(run_async, run) if _is_async(run) else run)
        if self.default_log_level is not None:
            parser.set_defaults(default_log_level=self.default_log_level)
        for flags, settings in self.options:
            parser.add_argument(*flags, **settings)


async def print_report(
    args: argparse.Namespace,
    read: Callable[[Transport], Awaitable[R]],
    render: Callable[[R, TextIO, str], None],
    *,
    read_only: bool = True,
) -> R:
    """Read a report from the store, then print it: JSON with ``--json``, else ``render``.

    The JSON form names the store first, so that saved outputs say what they describe.
    """
    async with open_transport(args, must_exist=True, read_only=read_only) as transport:
        report = await read(transport)
    if args.json:
        print_json({"store": store_label(args), **report.to_json()})
    else:
        render(report, sys.stdout, store_label(args))
    return report


def db_path(args: argparse.Namespace) -> Path:
    """The store file the embedded commands use: ``--db``, else :func:`default_db_path`."""
    db = getattr(args, "db", None)
    return Path(db).expanduser() if db else default_db_path()


def _is_default_db(args: argparse.Namespace) -> bool:
    return not getattr(args, "db", None) and not os.environ.get("NEOTOMA_AGENT_DB")


def resolve_url(args: argparse.Namespace) -> str | None:
    """The server to use, if any: ``--url``; else none if ``--db`` was given; else ``$NEOTOMA_URL``.

    So an explicit option always beats the environment, and ``--db`` overrides a
    ``NEOTOMA_URL`` exported for other tools. With both ``$NEOTOMA_URL`` and
    ``$NEOTOMA_AGENT_DB`` set and neither option given, it refuses rather than pick one.
    """
    url = getattr(args, "url", None)
    if url:
        if getattr(args, "db", None):
            raise CLIError("pass either --db or --url, not both")
        return str(url)
    if getattr(args, "db", None):
        return None
    env_url = os.environ.get("NEOTOMA_URL") or None
    if env_url and os.environ.get("NEOTOMA_AGENT_DB"):
        # Both name a store: picking one silently could read or write the wrong one.
        raise CLIError(
            "both NEOTOMA_AGENT_DB and NEOTOMA_URL are set",
            "pass --db or --url to choose, or unset one of them",
        )
    return env_url


def given_token(value: str | None, path: str | None, env: str, *, file_option: str) -> str | None:
    """A token given to a command, in the one order every command reads it: ``value`` (an
    option on argv, which every account sees in the process list: prefer the others), else
    the file ``path`` names (its first line; ``file_option`` names the option in errors),
    else the environment variable ``env``; else none."""
    from ._tokens import TokenFileError, read_token_file

    if value:
        return str(value)
    if path:
        try:
            return read_token_file(Path(path).expanduser())
        except TokenFileError as exc:
            raise CLIError(str(exc), f"pass {file_option} with a file holding the token") from None
    return os.environ.get(env) or None


def resolve_token(args: argparse.Namespace, *, url: str | None = None) -> str | None:
    """The token to send or serve with: the one place every command reads it from.

    ``--token``, else the file ``--token-file`` names, else ``$NEOTOMA_TOKEN``
    (:func:`given_token`); else, for a ``url`` on loopback, the token a server this account
    started there wrote (``tokens/PORT`` in the per-user data directory); else none.
    """
    from ._tokens import token_for_url

    token = given_token(
        getattr(args, "token", None),
        getattr(args, "token_file", None),
        "NEOTOMA_TOKEN",
        file_option="--token-file",
    )
    if token:
        return token
    return token_for_url(url) if url else None


def store_label(args: argparse.Namespace) -> str:
    """Where a command reads and writes, for humans: the server URL or the store file."""
    url = resolve_url(args)
    return url if url else str(db_path(args))


@contextlib.asynccontextmanager
async def open_transport(
    args: argparse.Namespace, *, must_exist: bool = False, read_only: bool = False
) -> AsyncIterator[Transport]:
    """The transport the global options name, closed when the block ends.

    With ``--url`` (or ``$NEOTOMA_URL``): an :class:`~neotoma_agent.transport.http.HttpTransport`
    with the token :func:`resolve_token` finds, if any. Otherwise the embedded store in
    ``--db`` (or ``$NEOTOMA_AGENT_DB``, or the per-user data directory, which is created).
    ``must_exist`` refuses to create a new, empty store file: reading one is a mistake;
    ``read_only`` opens the file for reading only (a read-only file or directory works).
    With ``--user``, the transport acts for that user alone: the store's ``for_user`` view,
    or the server's requests carrying ``user_id``.
    """
    user = given_user(args)
    url = resolve_url(args)
    if url:
        async with _http_transport(args, url, user) as transport:
            yield transport
        return

    import sqlite3

    from ..transport.embedded import EmbeddedStore

    path = db_path(args)
    if must_exist and not path.exists():
        raise CLIError(
            f"no store at {path}",
            "check --db (or NEOTOMA_AGENT_DB); `chat`, `import` and `demo --db` create one",
        )
    if _is_default_db(args):
        private_parent(path)
    try:
        store = EmbeddedStore.open(path, read_only=read_only)
    except sqlite3.OperationalError as exc:
        # A file an earlier release wrote: a read-only open cannot upgrade it, so a read
        # command upgrades it first (as any writing command would), then reads it.
        if not read_only or not await _upgraded(path):
            raise store_error(path, exc) from exc
        try:
            store = EmbeddedStore.open(path, read_only=True)
        except (OSError, sqlite3.Error) as again:
            raise store_error(path, again) from again
    except (OSError, sqlite3.Error) as exc:
        raise store_error(path, exc) from exc
    async with store:
        yield store if user is None else store.for_user(user)


def _schema_version(path: Path) -> int | None:
    """The schema version of the SQLite file at ``path`` (None: it cannot be read)."""
    import sqlite3

    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except (OSError, sqlite3.Error):
        return None


async def _upgraded(path: Path) -> bool:
    """Upgrade the store file at ``path`` if an earlier release wrote it (a read-only open
    cannot): whether it is now this release's. Says so on stderr, since that release can
    no longer open the file. A file this release cannot upgrade (a newer release's, one
    it may not write) is left as it is: ``False``."""
    import sqlite3

    from ..transport.embedded import EmbeddedStore

    version = _schema_version(path)
    if not version:  # not SQLite, or empty: nothing to upgrade (and nothing to create)
        return False
    try:
        async with EmbeddedStore.open(path):  # refuses a newer schema, upgrades an older
            pass
    except (OSError, sqlite3.Error):
        return False
    now = _schema_version(path)
    if now is not None and now > version:
        print(
            f"neotoma-agent: upgraded the store file {path} from schema version {version} "
            f"to {now} (the release that wrote it can no longer open it)",
            file=sys.stderr,
        )
    return True


@contextlib.asynccontextmanager
async def _http_transport(
    args: argparse.Namespace, url: str, user: str | None
) -> AsyncIterator[Transport]:
    from ..transport.http import HttpTransport

    token = resolve_token(args, url=url)
    try:
        transport = HttpTransport(url, token=token)
    except ValueError as exc:
        raise CLIError(
            f"bad --url: {exc}", "pass the server root, e.g. http://127.0.0.1:3080"
        ) from None
    async with transport:
        health = await _check_neotoma(transport, url)
        if user is None:
            from ..reads import identify

            # A token alone may be one user's (serve --users): learn whose, so that the
            # ids derived here (a conversation's, for show) are the server's.
            await identify(transport)
            yield transport
            return
    from .. import LOCAL_USER_ID
    from ..transport.http import tenant_scoped

    # A server that derives entity ids under the user says so (the dev server does): the
    # ids this side computes (a conversation's) must be derived the same way.
    scoped = tenant_scoped(health) and user != LOCAL_USER_ID
    async with HttpTransport(url, token=token, user_id=user, tenant_scoped_ids=scoped) as mine:
        yield mine


async def _check_neotoma(transport: Any, url: str) -> Mapping[str, Any]:
    from ..exceptions import NotFoundError, ServerError, ValidationError

    # Anything may listen at a URL; without this, a command against an unrelated server
    # would seem to work and store nothing.
    try:
        health: Mapping[str, Any] = await transport.health()
        return health
    except (ServerError, NotFoundError, ValidationError) as exc:
        raise CLIError(
            f"{url} is not a Neotoma server ({exc.message})",
            "check --url / NEOTOMA_URL: it should be the root of a Neotoma server, e.g. "
            "http://127.0.0.1:3080 (`neotoma-agent serve` runs a local one)",
        ) from None


def store_error(path: Path, exc: BaseException) -> CLIError:
    """The one-line explanation of why the store file at ``path`` cannot be opened."""
    import sqlite3

    if isinstance(exc, IsADirectoryError) or path.is_dir():
        return CLIError(f"cannot open the store {path}: it is a directory", "pass a file path")
    if isinstance(exc, FileNotFoundError):
        return CLIError(
            f"cannot open the store {path}: directory {path.parent} does not exist",
            "create the directory, or pass --db with a file in an existing directory",
        )
    if isinstance(exc, PermissionError):
        return CLIError(f"cannot open the store {path}: permission denied")
    from ..transport.embedded import WrongFileKind

    if isinstance(exc, WrongFileKind):
        return CLIError(str(exc), exc.hint)  # it names the file
    if isinstance(exc, sqlite3.DatabaseError):
        return CLIError(
            f"cannot open the store {path}: {exc}",
            "--db must name a neotoma-agent store file (or a new file)",
        )
    return CLIError(f"cannot open the store {path}: {exc}")


def explain(exc: BaseException, args: argparse.Namespace | None = None) -> CLIError | None:
    """The one-line message (and hint) for an error a user can cause, or ``None`` for a bug."""
    import sqlite3

    from ..exceptions import (
        APIError,
        AuthenticationError,
        ConnectionLost,
        ConnectTimeout,
        NeotomaError,
        NotFoundError,
        ReadTimeout,
    )

    if isinstance(exc, CLIError):
        return exc
    nested = getattr(exc, "exceptions", None)
    if isinstance(nested, tuple) and len(nested) == 1:
        # One failure out of a task group: explain the failure, not the group.
        return explain(nested[0], args)
    try:
        url = resolve_url(args) if args is not None else None
    except CLIError:
        url = None
    where = f"the Neotoma server at {url}" if url else "the store"
    if isinstance(exc, (ConnectionLost, ConnectTimeout)):
        return CLIError(
            f"cannot reach {where}",
            "is it running? start a local one with `neotoma-agent serve`, "
            "or check --url / NEOTOMA_URL",
        )
    if isinstance(exc, ReadTimeout):
        return CLIError(f"{where} did not answer in time", "try again, or check the server")
    if isinstance(exc, AuthenticationError):
        try:
            has_token = args is not None and resolve_token(args, url=url) is not None
        except CLIError:
            has_token = False
        return CLIError(
            f"{where} refused the credentials ({exc.status} {exc.code or 'unauthorized'})",
            "check the token in --token-file / NEOTOMA_TOKEN"
            if has_token
            else "pass the server's token with --token-file or NEOTOMA_TOKEN",
        )
    if isinstance(exc, NotFoundError):
        return CLIError(f"not found: {exc.message}")
    if isinstance(exc, APIError):
        return CLIError(f"{where} refused the request: {exc.message}", exc.hint)
    if isinstance(exc, NeotomaError):
        return CLIError(str(exc))
    if isinstance(exc, sqlite3.Error):
        path = db_path(args) if args is not None else Path("?")
        return store_error(path, exc)
    if isinstance(exc, OSError):
        if exc.strerror and exc.filename:
            return CLIError(f"{exc.strerror}: {exc.filename}")
        return CLIError(str(exc))
    if isinstance(exc, ValueError):
        return CLIError(str(exc))
    return None


def run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run one command's coroutine on a fresh asyncio loop (HttpTransport needs asyncio)."""
    import anyio

    return anyio.run(fn, *args, backend="asyncio")


def display_name(snapshot: Mapping[str, Any], canonical_name: str | None, entity_id: str) -> str:
    """How an entity is named to a human: its name or title, else its canonical name, else id."""
    for key in ("name", "title", "full_name", "legal_name", "email", "conversation_id"):
        value = snapshot.get(key)
        if isinstance(value, str) and value:
            return value
    return canonical_name or entity_id


def print_json(value: object, out: TextIO | None = None) -> None:
    """Pretty JSON on stdout (non-ASCII kept as is: it is the exact content)."""
    stream = out or sys.stdout
    stream.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """A progress line with rate and ETA on a terminal; a plain line now and then otherwise.

    On a TTY the line is redrawn in place (at most ten times a second); elsewhere (a log
    file, CI) one line is written every ``interval`` seconds, so the output stays readable.
    ``clock`` (seconds, monotonic) is what the rate, the ETA and the interval are read
    from: a test passes its own, so that a loaded machine cannot change the figures.
    """

    def __init__(
        self,
        total: int,
        *,
        label: str = "progress",
        unit: str = "items",
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self._clock = clock
        self.started = clock()
        self._last = self.started
        self._drawn = False
        encoding = getattr(self.stream, "encoding", None) or "ascii"
        try:
            "█░".encode(encoding)
            self._bar = ("█", "░")
        except (UnicodeEncodeError, LookupError):
            self._bar = ("#", "-")

    def line(self, done: int, columns: int | None = None) -> str:
        """The progress text for ``done`` items (without the bar on a non-TTY).

        On a terminal it fits in ``columns`` (default: the terminal's width) less one, so a
        redraw never wraps onto a new line: the bar shrinks first, then goes, then the
        least useful parts (ETA, rate) go.
        """
        elapsed = max(self._clock() - self.started, 1e-9)
        rate = done / elapsed
        counts = [f"{done:,}/{self.total:,} {self.unit}"]
        if self.total:
            counts.append(f"{100 * done / self.total:.0f}%")
        extras = [f"{rate:,.0f}/s"]
        if done and rate > 0 and self.total > done:
            extras.append(f"ETA {_duration((self.total - done) / rate)}")
        if not self.tty:
            return "  ".join([self.label, *counts, *extras])
        import shutil

        room = (columns or shutil.get_terminal_size((80, 24)).columns) - 1
        while True:
            text = "  ".join([self.label, *counts, *extras])
            bar_width = min(24, room - len(text) - 2)
            if self.total and bar_width >= 5:
                filled = min(bar_width, int(bar_width * done / self.total))
                bar = self._bar[0] * filled + self._bar[1] * (bar_width - filled)
                return "  ".join([self.label, bar, *counts, *extras])
            if len(text) <= room or not extras:
                return text[:room]
            extras.pop()

    def update(self, done: int) -> None:
        """Report ``done`` items; drawn only if the interval has passed."""
        now = self._clock()
        if now - self._last < self.interval:
            return
        self._last = now
        self._draw(done)

    def _draw(self, done: int) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(done))
            self._drawn = True
        else:
            self.stream.write(self.line(done) + "\n")
        self.stream.flush()

    def finish(self, done: int) -> None:
        """Clear the TTY line (the caller prints its own summary)."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False
