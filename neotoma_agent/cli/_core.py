"""The command line's only door to private core modules: each name kept for a reason.

Everything the commands read goes through the public API (:mod:`neotoma_agent.reads` and
the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same modules):

- ``_util.terminal``: the parser and the hook command escape what they print without loading
  :mod:`neotoma_agent.reads` (whose ``printable`` is the same function): a hook is a fresh
  process per event;
- ``_util.shield``: a batch ``import`` is writing when the user presses Ctrl-C finishes
  (bounded) under the turn protocol's own shield, so that its summary counts exactly what
  is stored.

``_util.shield`` is imported when a function of it is first called, so a hook process (or the
parser), which only escapes text, does not load it (nor anyio).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._util.terminal import printable as printable

if TYPE_CHECKING:
    from .._util.shield import Completion

__all__ = ["printable", "raise_deferred", "run_to_completion"]

T = TypeVar("T")


async def run_to_completion(fn: Callable[[], Awaitable[T]], deadline_s: float) -> Completion[T]:
    """Await ``fn()`` to its end or to ``deadline_s``, shielded from every cancellation (the
    turn protocol's shield); its outcome, and a cancellation to re-raise after."""
    from .._util.shield import run_to_completion as run

    return await run(fn, deadline_s)


async def raise_deferred(completion: Completion[Any], pending: BaseException | None) -> None:
    """Re-raise a cancellation that arrived while :func:`run_to_completion` ran."""
    from .._util.shield import raise_deferred as deferred

    await deferred(completion, pending)
