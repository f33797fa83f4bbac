"""The ``neotoma-agent`` command line (the console script is :func:`console_main`).

:mod:`._main` parses and dispatches; each subcommand is one module (``_chat``, ``_show``,
``_import``, ``_stats``, ``_audit``, ``_demo``, ``_serve``), and :mod:`._common` holds what
they share.
"""

from __future__ import annotations

from ._main import build_parser, console_main, default_db_path, main

__all__ = ["build_parser", "console_main", "default_db_path", "main"]
