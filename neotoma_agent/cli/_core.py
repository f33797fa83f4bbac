"""The command line's only door to private core modules: each name kept for a reason.

Everything the commands read goes through the public API (:mod:`neotoma_agent.reads` and
the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same modules):

- ``_terminal``: the parser and the hook command escape what they print without loading
  :mod:`neotoma_agent.reads` (whose ``printable`` is the same function): a hook is a fresh
  process per event;
- ``_private``: the tokens, paths and forget receipts it writes are 0600 files in 0700
  directories, written as the library writes its own;
- ``_shield``: a batch ``import`` is writing when the user presses Ctrl-C finishes
  (bounded) under the turn protocol's own shield, so that its summary counts exactly what
  is stored.

``_private`` and ``_shield`` are imported when a function of theirs is first called, so a
hook process (or the parser), which only escapes text, loads neither (nor anyio).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._terminal import printable as printable

if TYPE_CHECKING:
    from .._shield import Completion

__all__ = ["printable", "private_dir", "raise_deferred", "replace_private", "run_to_completion"]

T = TypeVar("T")


def private_dir(path: str | os.PathLike[str], *, tighten: bool = False) -> None:
    """Create the directory ``path`` 0700, as the library creates its own (``tighten``: set
    an existing one 0700 too)."""
    from .._private import private_dir as make

    make(path, tighten=tighten)


def replace_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all, 0600, as the library writes its files."""
    from .._private import replace_private as replace

    replace(path, data)


async def run_to_completion(fn: Callable[[], Awaitable[T]], deadline_s: float) -> Completion[T]:
    """Await ``fn()`` to its end or to ``deadline_s``, shielded from every cancellation (the
    turn protocol's shield); its outcome, and a cancellation to re-raise after."""
    from .._shield import run_to_completion as run

    return await run(fn, deadline_s)


async def raise_deferred(completion: Completion[Any], pending: BaseException | None) -> None:
    """Re-raise a cancellation that arrived while :func:`run_to_completion` ran."""
    from .._shield import raise_deferred as deferred

    await deferred(completion, pending)
