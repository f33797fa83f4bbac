"""The ``neotoma-agent`` command line: the parser (global options), logging setup, dispatch.

Each subcommand lives in its own module of this package with a ``register(subparsers)``
function that adds its parser and sets ``func(args) -> int``. They are imported here by
name, every one of them, so that type checkers and readers see the whole command line.

Rendering of log events is configured here, for the command line only: the library itself
never calls ``structlog.configure()``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import MutableMapping, Sequence

from .._terminal import printable
from .._version import __version__
from . import _audit, _chat, _demo, _hook, _import, _outbox, _serve, _show, _stats
from ._common import CLIError, default_db_path, explain

__all__ = ["build_parser", "default_db_path", "main"]

#: the subcommands, in the order ``--help`` lists them
_COMMANDS = (_demo, _chat, _show, _import, _stats, _audit, _serve, _outbox, _hook.HOOK, _hook.HOOKS)

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

_EPILOG = """\
The store is the SQLite file in --db (default: $NEOTOMA_AGENT_DB, else a per-user data
directory), or a Neotoma server with --url (default: $NEOTOMA_URL) and --token (default:
$NEOTOMA_TOKEN). Global options may come before or after the command.

Start with:  neotoma-agent demo
"""


def _configure_logging(level: str, as_json: bool) -> None:
    import structlog

    numeric = logging.getLevelName(level.upper())

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


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
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
                "help": "bearer token for --url (default: $NEOTOMA_TOKEN); "
                "for `serve`, the token clients must send",
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
    for flag, kwargs in options:
        if flag not in existing:
            group.add_argument(flag, **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``neotoma-agent``, with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="neotoma-agent",
        description="Crash-safe Neotoma memory for LLM agent loops.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _COMMANDS:
        command.register(sub)
    for subparser in sub.choices.values():
        _add_global_options(subparser, defaults=False)
    return parser


def _fail(error: CLIError) -> int:
    # A message can quote what a server or a store said: no raw control sequences.
    print(f"neotoma-agent: error: {printable(error.message)}", file=sys.stderr)
    if error.hint:
        print(f"  hint: {printable(error.hint)}", file=sys.stderr)
    return error.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neotoma-agent`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    args.log_level = args.log_level or getattr(args, "default_log_level", "warning")
    _configure_logging(args.log_level, args.log_json)
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
