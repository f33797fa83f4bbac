"""The command line's only door to private core modules: each name kept for a reason.

Everything the commands read goes through the public API (:mod:`neotoma_agent.reads` and
the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same modules):

- ``_terminal``: the parser and the hook command escape what they print without loading
  :mod:`neotoma_agent.reads` (whose ``printable`` is the same function): a hook is a fresh
  process per event;
- ``_lazy``: each name here is imported when first used, so a hook process (or the
  parser) that never imports turns in bulk never loads the shield (and anyio with it);
- ``_private``: the tokens, paths and forget receipts it writes are 0600 files in 0700
  directories, written as the library writes its own;
- ``_shield``: a batch ``import`` is writing when the user presses Ctrl-C finishes
  (bounded) under the turn protocol's own shield, so that its summary counts exactly what
  is stored;
"""

from __future__ import annotations

from .._lazy import lazy_exports

with lazy_exports(globals()):
    from .._private import private_dir as private_dir
    from .._private import replace_private as replace_private
    from .._shield import raise_deferred as raise_deferred
    from .._shield import run_to_completion as run_to_completion
    from .._terminal import printable as printable
