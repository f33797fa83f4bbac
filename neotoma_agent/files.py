"""Owner-only files, written as the library writes its own: ``0600``, whatever the umask.

Every file the library and its command line write holds message text or a secret (the
store, an outbox, a forget record, a token), so each is created ``0600`` before a byte is
written to it, and a directory made for one is ``0700`` (see the security guide). A tool
built on the library that writes what it read from a store (an export, a report, a kept
:class:`~neotoma_agent.Forgotten` record) writes it the same way::

    import json
    from neotoma_agent.files import private_dir, replace_private

    private_dir("exports")                       # 0700
    replace_private("exports/support-42.json", json.dumps(record).encode())

:func:`replace_private` writes a file whole or not at all (a reader never sees half of it,
and a failure leaves the old file as it was); :func:`write_private` writes in place,
optionally refusing an existing file; :func:`private_file` creates an empty file (or sets
an existing one, and an SQLite file's ``-wal`` / ``-shm`` / ``-journal``) to ``0600``.
"""

from __future__ import annotations

from typing import Final

from ._util.private import DIR_MODE as _DIR_MODE
from ._util.private import FILE_MODE as _FILE_MODE
from ._util.private import private_dir as private_dir
from ._util.private import private_file as private_file
from ._util.private import replace_private as replace_private
from ._util.private import write_private as write_private

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "private_dir",
    "private_file",
    "replace_private",
    "write_private",
]

#: The mode of every file written: owner read and write (``0o600``).
FILE_MODE: Final[int] = _FILE_MODE

#: The mode of a directory created for one: owner only (``0o700``).
DIR_MODE: Final[int] = _DIR_MODE

for _function in (private_dir, private_file, replace_private, write_private):
    # Reprs and help() name the namespace users import from, not the private module.
    _function.__module__ = __name__
del _function
