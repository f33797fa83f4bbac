"""The ``neotoma-agent`` command line: the parser (global options), logging setup, dispatch.

Each subcommand lives in its own module of this package with a ``register(subparsers)``
function that adds its parser and sets ``func(args) -> int``. :data:`_COMMANDS` names them
all; a run imports only the module of the command it runs (``--help`` imports them all), so
that ``neotoma-agent --version`` or ``show`` does not pay for the audit, the HTTP client or
the dev server: :func:`main` first finds the command in the arguments, then builds the
parser with that command in full.

Rendering of log events is configured here, for the command line only: the library itself
never calls ``structlog.configure()``. structlog is imported at the first event that shows
(most commands log none).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from .. import __version__
from ..log import LOGGER_NAME
from ._core import printable
from ._paths import default_db_path

if TYPE_CHECKING:
    from ._common import CLIError

__all__ = ["build_parser", "default_db_path", "main"]

#: the subcommands, in the order ``--help`` lists them: name -> the module of this package
#: that registers it
_COMMANDS = {
    "demo": "._demo",
    "chat": "._chat",
    "show": "._show",
    "search": "._search",
    "import": "._import",
    "export": "._export",
    "forget": "._forget",
    "stats": "._stats",
    "audit": "._audit",
    "serve": "._serve",
    "ui": "._ui",
    "outbox": "._outbox",
    "hook": "._hook",
    "hooks": "._hooks",
}

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

_EPILOG = """\
The store is the SQLite file in --db (default: $NEOTOMA_AGENT_DB, else a per-user data
directory), or a Neotoma server with --url (default: $NEOTOMA_URL) and its token: from
--token-file or $NEOTOMA_TOKEN, or found by itself for a server `serve` started on this
machine. Global options may come before or after the command.

Start with:  neotoma-agent demo
"""


def _configure_structlog(numeric: int, as_json: bool) -> None:
    import structlog

    def quiet_retries(
        logger: object, method: str, event: MutableMapping[str, object]
    ) -> MutableMapping[str, object]:
        # A retried request is routine (and a final failure is reported as an error line),
        # so the command line shows retries from --log-level info on, not at warning.
        if event.get("event") == "transport.retry" and numeric > logging.INFO:
            raise structlog.DropEvent
        return event

    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            quiet_retries,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


class _ConfigureOnFirstEvent(logging.Handler):
    """Until an event shows, the library's events take the standard logging path (structlog
    not loaded); the first one that does configures structlog, goes through it, and
    every later one goes there directly."""

    def __init__(self, level: int, as_json: bool) -> None:
        super().__init__(level)
        self.as_json = as_json

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(LOGGER_NAME).removeHandler(self)
        _configure_structlog(self.level, self.as_json)
        import structlog

        event = getattr(record, "neotoma_event", None) or record.getMessage()
        fields: dict[str, Any] = getattr(record, "neotoma_fields", {})
        method = getattr(structlog.get_logger(LOGGER_NAME), record.levelname.lower())
        method(event, **fields)


def _configure_logging(level: str, as_json: bool) -> Callable[[], None]:
    """Render the library's events from ``level`` on, to stderr; what undoes it all (for a
    caller that runs :func:`main` in-process: its logging is as it was before)."""
    numeric = logging.getLevelName(level.upper())
    std = logging.getLogger(LOGGER_NAME)
    level_before = std.level
    loaded = sys.modules.get("structlog")
    config_before = loaded.get_config() if loaded is not None and loaded.is_configured() else None
    handler: _ConfigureOnFirstEvent | None = None
    if loaded is not None:  # loaded anyway (an application, a test): configure it at once
        _configure_structlog(numeric, as_json)
    else:
        handler = _ConfigureOnFirstEvent(numeric, as_json)
        std.addHandler(handler)
        std.setLevel(numeric)

    def undo() -> None:
        if handler is not None and handler in std.handlers:
            std.removeHandler(handler)
        std.setLevel(level_before)
        structlog = sys.modules.get("structlog")
        if structlog is None:
            return
        if config_before is not None:
            structlog.configure(**config_before)
        elif structlog.is_configured():
            structlog.reset_defaults()

    return undo


#: per command, what a global option means there: ``None`` hides it from the command's
#: ``--help`` (still accepted, so that the command can say why it does not apply), a
#: string replaces its help
_GLOBAL_HELP: dict[str, dict[str, str | None]] = {
    "serve": {
        "--url": None,
        "--token": "the bearer token clients must send (default: --token-file, else "
        "$NEOTOMA_TOKEN, else a new one each start, kept in the per-user data directory)",
    },
}


def _add_global_options(
    parser: argparse.ArgumentParser, *, defaults: bool, command: str | None = None
) -> None:
    """The options every command takes.

    The top-level parser gets the real defaults; each subparser gets the same options with
    suppressed defaults, so ``neotoma-agent show X --db f`` works like
    ``neotoma-agent --db f show X`` without a subparser resetting what the top level parsed.
    """

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    existing = set(parser._option_string_actions)
    options: list[tuple[str, dict[str, object]]] = [
        (
            "--db",
            {
                "metavar": "PATH",
                "default": default(None),
                "help": "store file (default: $NEOTOMA_AGENT_DB, else "
                f"{default_db_path() if defaults else 'the per-user data directory'})",
            },
        ),
        (
            "--url",
            {
                "metavar": "URL",
                "default": default(None),
                "help": "use the Neotoma server at URL instead of the store file "
                "(default: $NEOTOMA_URL)",
            },
        ),
        (
            "--token",
            {
                "metavar": "TOKEN",
                "default": default(None),
                "help": "bearer token for --url (default: $NEOTOMA_TOKEN); other accounts "
                "see argv: prefer --token-file or $NEOTOMA_TOKEN",
            },
        ),
        (
            "--token-file",
            {
                "metavar": "PATH",
                "default": default(None),
                "help": "read the token from this file (kept out of the process list); "
                "a loopback server started by `serve` is found without it",
            },
        ),
        (
            "--log-level",
            {
                "choices": _LOG_LEVELS,
                "default": default(None),
                "type": str.lower,
                "help": "log events from this level on, to stderr (default: warning; "
                "error for demo and chat, which report abandoned turns themselves)",
            },
        ),
        (
            "--log-json",
            {
                "action": "store_true",
                "default": default(False),
                "help": "log events as JSON lines",
            },
        ),
    ]
    group = parser.add_argument_group("global options")
    meanings = _GLOBAL_HELP.get(command or "", {})
    for flag, kwargs in options:
        if flag in meanings:
            meaning = meanings[flag]
            kwargs = {**kwargs, "help": argparse.SUPPRESS if meaning is None else meaning}
        elif command is not None and flag == "--token":
            kwargs = {
                **kwargs,
                "help": "bearer token for --url (default: $NEOTOMA_TOKEN); other accounts "
                "see argv: prefer --token-file or $NEOTOMA_TOKEN",
            }
        if flag not in existing:
            group.add_argument(flag, **kwargs)  # type: ignore[arg-type]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``neotoma-agent``, with every subcommand.

    With ``command``, only that command's module is imported and only its parser is built
    (what :func:`main` parses with, once it knows the command: ``--help``, which lists every
    command, goes through the full parser).
    """
    parser = argparse.ArgumentParser(
        prog="neotoma-agent",
        description="Crash-safe Neotoma memory for LLM agent loops.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module, __package__).register(sub)
            assert name in sub.choices, f"{module} registers no {name!r} command"
    for name, subparser in sub.choices.items():
        _add_global_options(subparser, defaults=False, command=name)
    return parser


class _Unsure(Exception):
    """The scout cannot tell the command: the full parser will say what is wrong."""


class _Scout(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _Unsure(message)


def _command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, or ``None`` (no command, help asked for, a mistake).

    Parsed as the full parser would up to the command (the top-level options, with their
    values), without building any command's parser: so no command module is imported.
    """
    scout = _Scout(prog="neotoma-agent", add_help=False)
    scout.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    scout.add_argument("-h", "--help", action="store_true")
    _add_global_options(scout, defaults=False)
    scout.add_argument("command", nargs="?")
    scout.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        found, _ = scout.parse_known_args(argv)
    except _Unsure:
        return None
    command = getattr(found, "command", None)
    return None if found.help or command not in _COMMANDS else str(command)


def _fail(error: CLIError) -> int:
    # A message can quote what a server or a store said: no raw control sequences.
    print(f"neotoma-agent: error: {printable(error.message)}", file=sys.stderr)
    if error.hint:
        print(f"  hint: {printable(error.hint)}", file=sys.stderr)
    return error.exit_code


def console_main() -> NoReturn:
    """The ``neotoma-agent`` console script and ``python -m neotoma_agent``: :func:`main`,
    then exit with its status."""
    try:
        status = main()
    finally:
        # The process ends here (argparse's own exits included). Freezing the heap spares
        # the interpreter's final collection a walk over every object the command loaded
        # (a server's modules: a quarter to most of a second on a loaded machine, after the
        # work is done); atexit handlers, buffered output and the store's own close
        # (already finished) are unaffected.
        gc.freeze()
    sys.exit(status)


def _parse_hook_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | None:
    """``hook``'s command line, or ``None`` after a mistake in it (reported in one line).

    A hook exits 0 whatever is wrong, its command line included (an option a later release
    renamed, a settings file edited by hand): argparse's exit status 2 is what Claude Code
    and Codex read as "block this prompt".
    """
    import contextlib
    import io

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, printed on stdout
            raise
        lines = said.getvalue().strip().splitlines()
        last = lines[-1] if lines else ""
        detail = last.split(": error: ", 1)[-1] if ": error: " in last else last
        print(f"neotoma-agent hook: command line ignored: {printable(detail)}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``neotoma-agent`` command in this process; return its exit status.

    ``argv`` defaults to ``sys.argv[1:]``. The console script is :func:`console_main`.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_in(argv)
    parser = build_parser(command)
    if command == "hook":
        hook_args = _parse_hook_args(parser, argv)
        if hook_args is None:
            return 0
        args = hook_args
    else:
        args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        # No command: a short usage on stderr (stdout stays empty for a script), not the
        # whole --help.
        parser.print_usage(sys.stderr)
        print(
            f"commands: {', '.join(_COMMANDS)}\n"
            "`neotoma-agent --help` says more; start with `neotoma-agent demo`",
            file=sys.stderr,
        )
        return 2
    from ._common import explain

    args.log_level = args.log_level or getattr(args, "default_log_level", "warning")
    undo_logging = _configure_logging(args.log_level, args.log_json)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("neotoma-agent: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `neotoma-agent show x | head`: the reader left; not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        # User mistakes and unreachable stores get one line and a hint, not a traceback.
        error = explain(exc, args)
        if error is None:
            raise
        if args.log_level == "debug":
            traceback.print_exc()
        return _fail(error)
    finally:
        undo_logging()
