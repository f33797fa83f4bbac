"""Files that hold conversations or secrets: owner-only, whatever the umask.

Every file the library or the command line writes holds message text (the store, the
outbox, the hooks' state, ``forget --save``) or a harness's settings (the backups
``hooks install`` keeps): each is created 0600 here, before anything is written to it, and
a directory the library creates for one is 0700. An SQLite file's ``-wal``, ``-shm`` and
``-journal`` files take the mode of their database when SQLite creates them; one left
from before (an older version wrote 0644) is set 0600 when the file is opened.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

# No __all__: neotoma_agent.files lists the public names (each list in one place).

#: the mode of every file written
FILE_MODE: Final = 0o600
#: the mode of a directory created for one
DIR_MODE: Final = 0o700
_SQLITE_SIDECARS: Final = ("-wal", "-shm", "-journal")


def _tighten(path: str, mode: int) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if stat.S_IMODE(st.st_mode) & ~mode:
        # Another account's file (a shared store it let us open): its mode is its own.
        with contextlib.suppress(PermissionError):
            os.chmod(path, mode)


def private_dir(path: str | os.PathLike[str], *, tighten: bool = False) -> None:
    """Create the directory ``path`` 0700 (its missing parents as ``mkdir -p`` does);
    with ``tighten``, an existing one is set 0700 too (the library's own data directory,
    never a directory the user named)."""
    path = Path(path)
    if not path.is_dir():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if tighten:
        _tighten(os.fspath(path), DIR_MODE)


def private_file(path: str | os.PathLike[str], *, sqlite: bool = True) -> None:
    """Create ``path`` empty and 0600 if it does not exist; set an existing one (and, for
    an SQLite file, its ``-wal`` / ``-shm`` / ``-journal``) to 0600."""
    name = os.fspath(path)
    # Only a missing file is opened (to create it). Closing any descriptor of a file drops
    # every POSIX lock this process holds on it: an SQLite file open here (a store's own
    # connection, say) would lose the shared lock that tells another process's connection,
    # closing, that it is not the last one (which then checkpoints and deletes the WAL
    # under this one's feet: "database disk image is malformed").
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass
    else:
        os.close(fd)
    _tighten(name, FILE_MODE)
    if sqlite:
        for suffix in _SQLITE_SIDECARS:
            _tighten(name + suffix, FILE_MODE)


def write_private(path: str | os.PathLike[str], data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path``, 0600 whatever the umask (an existing file is truncated and
    set 0600; with ``exclusive``, an existing file is an error: :class:`FileExistsError`)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(os.fspath(path), flags, FILE_MODE)
    try:
        if hasattr(os, "fchmod"):  # pragma: no branch - not on Windows before 3.13
            os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def replace_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all, 0600: a temporary file (0600) in the
    same directory, flushed to disk, then renamed over ``path``. A reader never sees half
    of it, and a failure (a full disk, a directory that cannot be written) leaves ``path``
    as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
