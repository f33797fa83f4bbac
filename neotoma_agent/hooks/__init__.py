"""Coding-agent hooks: every Claude Code, Codex and Cursor turn stored in Neotoma.

A coding agent runs a command per event (a prompt submitted, a tool used, the agent
stopping), each a fresh process reading one JSON object on stdin. ``neotoma-agent hook
HARNESS EVENT`` is that command: it pairs the prompt and the reply of a turn by the
harness's own ids (Claude Code ``session_id`` + ``prompt_id``, Codex ``session_id`` +
``turn_id``, Cursor ``conversation_id`` + ``generation_id``) through the public
``open_turn`` / ``close_turn`` / ``abandon_turn`` API, keeps tool calls for the closing
store, and answers the prompt with ``OpenTurn.context()`` in the shape the harness honours.
State shared between the processes lives in one SQLite file (:mod:`._state`).

``neotoma-agent hooks install | uninstall | status HARNESS`` manages the entries in the
harness's settings. The modules: one per harness (``claude_code``, ``codex``, ``cursor``:
its fields, its answers, its settings file), ``_event`` (what an input means), ``_state``,
``_run`` (one event, start to end) and ``_install``.

This package imports only the public API of ``neotoma_agent``, and that lazily: a hook
process loads the store it uses when it has something to deliver.
"""

from __future__ import annotations

from ._backfill import BackfillReport, backfill
from ._event import BadInput, HookEvent, Kind
from ._install import Change, InstallError, install, installed, uninstall
from ._run import HARNESSES, HookOutcome, StoreSpec, harness_module, run_hook
from ._state import HookState

__all__ = [
    "HARNESSES",
    "BackfillReport",
    "BadInput",
    "Change",
    "HookEvent",
    "HookOutcome",
    "HookState",
    "InstallError",
    "Kind",
    "StoreSpec",
    "backfill",
    "harness_module",
    "install",
    "installed",
    "run_hook",
    "uninstall",
]
