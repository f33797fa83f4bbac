"""The command line's only door to private core modules: each name kept for a reason.

Everything the commands read goes through the public API (:mod:`neotoma_agent.reads` and
the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same modules):

- ``_terminal``: the hook command and the parser escape what they print without loading
  the readers of :mod:`neotoma_agent.reads` (a hook is a fresh process per event);
- ``_log``: the command line configures the library's one logger by its name;
- ``_private``: the tokens, paths and forget receipts it writes are 0600 files in 0700
  directories, written as the library writes its own;
- ``_file_kind``: a store path that is no store file is reported as the library detects it;
- ``_memory``: ``chat`` asks for as much history as a turn reads by default;
- ``_demo``: ``demo`` runs the library's scripted demo conversation;
- ``_backup``, ``_batch``, ``_json_type``, ``_text``, ``_shield``: ``import`` and
  ``export`` write turns in bulk as the turn protocol writes them (its records, its checks,
  its shield against a cancel mid-batch), and read and write the backup format;
- ``_forget``: ``forget`` plans, applies and undoes a forget as the library does;
- ``_tool_payload``: ``show`` prints a tool call's arguments as the library summarises them;
- ``transport._search_fallback``: ``search`` searches a store that has no search endpoint
  the way the library does.

Each name is imported when first used (:func:`neotoma_agent._lazy.lazy_exports`), so a hook
process that never uses the backup code never loads it.
"""

from __future__ import annotations

from .._lazy import lazy_exports

with lazy_exports(globals()):
    from .._backup import BackupError as BackupError
    from .._backup import BackupStats as BackupStats
    from .._backup import is_backup_header as is_backup_header
    from .._backup import read_backup as read_backup
    from .._backup import restore_backup as restore_backup
    from .._batch import BatchOutcome as BatchOutcome
    from .._batch import BatchStore as BatchStore
    from .._batch import BatchTurn as BatchTurn
    from .._batch import record_batch as record_batch
    from .._demo import CONVERSATION_ID as CONVERSATION_ID
    from .._demo import run_demo as run_demo
    from .._demo import run_demo_on as run_demo_on
    from .._file_kind import WrongFileKind as WrongFileKind
    from .._forget import check_entity_id as check_entity_id
    from .._forget import forget_entity as forget_entity
    from .._forget import forget_planned as forget_planned
    from .._forget import plan_forget as plan_forget
    from .._forget import restore_conversation as restore_conversation
    from .._forget import restore_entity as restore_entity
    from .._memory import DEFAULT_HISTORY_TURNS as DEFAULT_HISTORY_TURNS
    from .._private import private_dir as private_dir
    from .._private import replace_private as replace_private
    from .._shield import raise_deferred as raise_deferred
    from .._shield import run_to_completion as run_to_completion
    from .._terminal import printable as printable
    from .._text import check_text as check_text
    from .._tool_payload import summarize as summarize
