"""The private core modules the hooks wing uses, each for a reason: the one door through
which they come (CONTRIBUTING, "Private imports a wing keeps"; ``tests/test_layout.py``
fails a private core import anywhere else in the wing).

- ``transport.embedded._turns``: on a store file a hook opens and closes its turns in its
  own thread, by the turn machine's synchronous driver (:func:`turn_file`): a fresh
  process that must answer at once loads neither the event loop nor the async driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..transport.embedded._turns import Opening, TurnFile

__all__ = ["Opening", "TurnFile", "turn_file"]


def turn_file(path: str, *, busy_timeout: float) -> TurnFile:
    """The store file at ``path``, to open and close turns on in this thread (a context
    manager; ``busy_timeout``: the seconds all its work together may wait for another
    writer's lock). Imported here, on use: a hook with nothing to store loads none of it."""
    from ..transport.embedded._turns import TurnFile

    return TurnFile(path, busy_timeout=busy_timeout)
