"""``neotoma-agent hooks install|uninstall|status HARNESS``: its own entry in the command
table (``_main`` imports one module per command), defined beside ``hook`` in ``_hook``."""

from __future__ import annotations

from ._hook import HOOKS

__all__ = ["register"]

register = HOOKS.register
