"""The command line's only door to private core modules: each name kept for a reason.

Everything the commands read goes through the public API (:mod:`neotoma_agent.reads` and
the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same modules):

- ``_terminal``: the parser and the hook command escape what they print without loading
  :mod:`neotoma_agent.reads` (whose ``printable`` is the same function): a hook is a fresh
  process per event;
- ``_lazy``: each name here is imported when first used, so a hook process that never
  imports a turn in bulk never loads that code;
- ``_private``: the tokens, paths and forget receipts it writes are 0600 files in 0700
  directories, written as the library writes its own;
- ``_batch``, ``_shield``: ``import`` writes turns in bulk as the turn protocol writes
  them (its records, its shield against a cancel mid-batch);
"""

from __future__ import annotations

from .._lazy import lazy_exports

with lazy_exports(globals()):
    from .._batch import BatchOutcome as BatchOutcome
    from .._batch import BatchStore as BatchStore
    from .._batch import BatchTurn as BatchTurn
    from .._batch import record_batch as record_batch
    from .._private import private_dir as private_dir
    from .._private import replace_private as replace_private
    from .._shield import raise_deferred as raise_deferred
    from .._shield import run_to_completion as run_to_completion
    from .._terminal import printable as printable
