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
its fields, its answers, its settings file), ``_event`` (what an input means), ``_input``
(the one reader the harnesses' field tables drive), ``_state``,
``_run`` (one event, start to end), ``_embedded_open`` and ``_embedded`` (a turn opened
and closed on a store file, in the hook's own thread) and ``_install``; ``import --from``
is ``_backfill`` (:func:`backfill`, for the harnesses of :data:`BACKFILL_SOURCES`), with a
reader per harness's session files (``_claude_transcript``, ``_codex_rollout``, both giving
``_transcript``'s turns).

The command line is a user of these names like any other: ``hook`` runs :func:`run_hook`
(:data:`HARNESSES`, :class:`StoreSpec`), ``forget --purge`` drops a conversation from the
:class:`HookState` file, ``import --from`` offers :data:`BACKFILL_SOURCES`.

This package imports the public API of ``neotoma_agent``, and that lazily: a hook process
loads the store it uses when it has something to deliver. Two private core modules come in
through ``_core`` alone, each for its reason there: the owner-only files, and the turn
machine's synchronous driver on a store file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backfill import BACKFILL_SOURCES, BackfillReport, backfill
    from ._event import BadInput, HookEvent, Kind
    from ._install import Change, InstallError, install, installed, uninstall
    from ._run import HARNESSES, Harness, HookOutcome, StoreSpec, harness_module, run_hook
    from ._state import HookState, PendingTurn

#: each public name -> the module that defines it, imported on first use (PEP 562): a hook
#: process runs one event and needs neither the installer nor the transcript import
_WHERE = {
    "BACKFILL_SOURCES": "_backfill",
    "BackfillReport": "_backfill",
    "backfill": "_backfill",
    "BadInput": "_event",
    "HookEvent": "_event",
    "Kind": "_event",
    "Change": "_install",
    "InstallError": "_install",
    "install": "_install",
    "installed": "_install",
    "uninstall": "_install",
    "HARNESSES": "_run",
    "Harness": "_run",
    "HookOutcome": "_run",
    "StoreSpec": "_run",
    "harness_module": "_run",
    "run_hook": "_run",
    "HookState": "_state",
    "PendingTurn": "_state",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "BACKFILL_SOURCES",
    "HARNESSES",
    "BackfillReport",
    "BadInput",
    "Change",
    "Harness",
    "HookEvent",
    "HookOutcome",
    "HookState",
    "InstallError",
    "Kind",
    "PendingTurn",
    "StoreSpec",
    "backfill",
    "harness_module",
    "install",
    "installed",
    "run_hook",
    "uninstall",
]
