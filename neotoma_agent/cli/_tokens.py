"""Where a token lives when it is not on a command line: 0600 files in a 0700 directory.

``serve`` and ``ui`` write the token they run with to ``tokens/PORT`` in the per-user data
directory (``~/.local/share/neotoma-agent/tokens/3080``) and remove it when they stop, so
that a client of this machine talking to ``http://127.0.0.1:3080`` finds it without being
told; ``hooks install --token`` keeps the token in ``tokens/hooks-HARNESS``. Another account
on the machine can read none of them. A token is never put in argv, a log or an error.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import urllib.parse
from pathlib import Path

from ._paths import data_dir

__all__ = [
    "new_token",
    "read_token_file",
    "remove_token_file",
    "server_token_file",
    "token_dir",
    "token_for_url",
    "write_token_file",
]

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class TokenFileError(Exception):
    """A token file cannot be read or written (the message names the file, never the token)."""


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_dir() -> Path:
    """``tokens`` in the per-user data directory."""
    return data_dir() / "tokens"


def server_token_file(port: int) -> Path:
    """Where a server started by this account on loopback ``port`` keeps its token."""
    return token_dir() / str(port)


def _private_dir(path: Path) -> None:
    """Create ``path`` 0700 (set so if it exists); refuse one that is not ours."""
    from ..files import private_dir

    # The data directory above it too: it also holds the hooks' state and forget records.
    private_dir(data_dir(), tighten=True)
    private_dir(path, tighten=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise TokenFileError(f"{path} is not a directory")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise TokenFileError(f"{path} belongs to another account")


def write_token_file(path: Path, token: str) -> Path:
    """Write ``token`` to ``path``, mode 0600, in a 0700 directory (whole or not at all)."""
    from ..files import replace_private

    _private_dir(path.parent)
    replace_private(path, (token + "\n").encode())
    return path


def remove_token_file(path: Path, token: str) -> None:
    """Remove ``path`` if it still holds ``token`` (a later server's file is left alone)."""
    with contextlib.suppress(OSError, TokenFileError):
        if read_token_file(path) == token:
            path.unlink()


def read_token_file(path: Path) -> str:
    """The token in ``path`` (its first line, stripped); :class:`TokenFileError` if none."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline(4096).strip()
    except FileNotFoundError:
        raise TokenFileError(f"no token file at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "unreadable"
        raise TokenFileError(f"cannot read the token file {path}: {reason}") from None
    if not token:
        raise TokenFileError(f"the token file {path} is empty")
    return token


def token_for_url(url: str) -> str | None:
    """The token a server this account started on loopback at ``url`` wrote, if any."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if host not in _LOOPBACK_NAMES or port is None:
        return None
    try:
        return read_token_file(server_token_file(port))
    except TokenFileError:
        return None


def announce_token(token: str, port: int, *, generated: bool, written: list[Path]) -> None:
    """Keep ``token`` in the server token file for ``port`` and say where (stdout).

    The path goes to ``written`` (to remove when the server stops). A file that cannot be
    written is a warning on stderr: the server still runs, its clients then need the token.
    """
    import sys

    path = server_token_file(port)
    try:
        write_token_file(path, token)
    except (OSError, TokenFileError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"warning: cannot keep the token in {path}: {reason}", file=sys.stderr, flush=True)
        return
    written.append(path)
    source = "a new token" if generated else "the token you gave"
    print(
        f"token: {source}, kept in {path} (mode 0600): clients of this account on this "
        "machine find it; elsewhere pass --token-file PATH or $NEOTOMA_TOKEN",
        flush=True,
    )


def login_link(page: str, token: str, given: str | None) -> str:
    """The web view's login link: with the token when it is new (the person cannot know it)."""
    if given is not None:
        return f"{page}?token=... (the token you gave; opened once, it logs the browser in)"
    return page + "?" + urllib.parse.urlencode({"token": token})
