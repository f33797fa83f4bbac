"""The run-print-save tail the storage benchmarks share (``disk_per_turn``, ``scale``,
``sqlite_floor``): quiet logging, one run, a table on stdout, the figures as JSON."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog
from _meta import environment


def run_and_report(
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
    render: Callable[[dict[str, Any]], str],
) -> None:
    """Run ``run(args)``, print ``render`` of its figures, write them to ``args.json``."""
    # The application (this script) decides logging: per-turn INFO events would dominate.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    meta = environment()
    result = anyio.run(run, args)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps({**result, "meta": meta}, indent=2) + "\n")
