"""The ``neotoma-agent`` command line.

Rendering of log events is configured here, for the command line only: the library itself
never calls ``structlog.configure()``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ._version import __version__
from .exceptions import NeotomaError

__all__ = ["main"]


def default_db_path() -> Path:
    """``$NEOTOMA_AGENT_DB``, else ``neotoma-agent/memory.db`` in the per-user data directory."""
    env = os.environ.get("NEOTOMA_AGENT_DB")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":  # pragma: no cover - not exercised in CI
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":  # pragma: no cover
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "neotoma-agent" / "memory.db"


def _configure_logging(level: str, as_json: bool) -> None:
    import structlog

    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise SystemExit(f"error: unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    import anyio

    from ._demo import run_demo

    anyio.run(run_demo, str(args.db) if args.db else None)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from .server import run_server

    db = args.db if args.db is not None else default_db_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    run_server(str(db), host=args.host, port=args.port, token=args.token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``neotoma-agent``."""
    parser = argparse.ArgumentParser(
        prog="neotoma-agent",
        description="Crash-safe Neotoma memory for LLM agent loops.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level", default="warning", help="debug, info, warning (default) or error"
    )
    parser.add_argument("--log-json", action="store_true", help="log events as JSON lines")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run a scripted conversation on the embedded store and show what was stored",
    )
    demo.add_argument(
        "--db", type=Path, default=None, help="store file (default: a temporary file)"
    )
    demo.set_defaults(func=_cmd_demo)

    serve = sub.add_parser("serve", help="serve an embedded store over Neotoma's REST API")
    serve.add_argument("--db", type=Path, default=None, help="store file")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=3080, help="port (default 3080)")
    serve.add_argument(
        "--token",
        default=os.environ.get("NEOTOMA_TOKEN"),
        help="require this bearer token (default $NEOTOMA_TOKEN)",
    )
    serve.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neotoma-agent`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    _configure_logging(args.log_level, args.log_json)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except (NeotomaError, OSError, ValueError) as exc:
        # User mistakes and unreachable stores get one line, not a traceback.
        print(f"neotoma-agent: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
