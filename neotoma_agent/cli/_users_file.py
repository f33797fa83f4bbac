"""``serve --users FILE``: the tokens of a dev server's users, one ``TOKEN USER_ID`` a line.

The file holds credentials, so it is refused when another account could read it (group or
world bits set), as ssh refuses a private key: ``chmod 600 FILE``. Blank lines and lines
starting with ``#`` are skipped; the user id is the rest of the line after the token and
one run of spaces or tabs (so an id may hold spaces), checked with
:func:`~neotoma_agent.check_user_id`. A mistake names the line's number and what is wrong,
never the token (nor the user id: it may be an email address).
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from ._common import CLIError, option

__all__ = ["USERS_OPTION", "UsersFileError", "given_users", "read_users_file"]

#: bytes read at most: a file of users, not a data set
_MAX_BYTES = 4 * 2**20


#: ``--users FILE``, on ``serve`` and ``ui``
USERS_OPTION = option(
    "--users",
    metavar="FILE",
    help="serve many users: FILE (mode 0600) has one `TOKEN USER_ID` a line; each token "
    "sees and acts for its user alone",
)


def given_users(args: argparse.Namespace) -> dict[str, str] | None:
    """The tokens ``--users`` binds to users, or ``None`` without it (a :class:`CLIError`
    for a file that cannot be used)."""
    if getattr(args, "users", None) is None:
        return None
    try:
        return read_users_file(Path(args.users).expanduser())
    except UsersFileError as exc:
        raise CLIError(str(exc), "each line: TOKEN USER_ID; the file mode 0600") from None


class UsersFileError(Exception):
    """The users file cannot be used; the message names the file (and line), never a token."""


def read_users_file(path: Path) -> dict[str, str]:
    """The token → user id map in ``path`` (:class:`UsersFileError` for any mistake)."""
    from .. import check_user_id
    from ..exceptions import InvalidUserIdError

    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        raise UsersFileError(f"no users file at {path}") from None
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UsersFileError(f"the users file {path} is not a regular file")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsersFileError(
            f"the users file {path} is readable by other accounts "
            f"(mode {stat.S_IMODE(mode):04o}): it holds tokens; run chmod 600 {path}"
        )
    if len(raw) > _MAX_BYTES:
        raise UsersFileError(f"the users file {path} is larger than {_MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsersFileError(f"the users file {path} is not UTF-8 text") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        words = stripped.split(None, 1)
        token, user = words[0], words[1].strip() if len(words) == 2 else ""
        where = f"{path}, line {number}"
        if not user:
            raise UsersFileError(f"{where}: expected TOKEN USER_ID, found one word")
        try:
            check_user_id(user)
        except InvalidUserIdError as exc:
            raise UsersFileError(f"{where}: {exc}") from None
        if token in users:
            raise UsersFileError(f"{where}: this token is on an earlier line too")
        users[token] = user
    if not users:
        raise UsersFileError(f"the users file {path} names no user")
    return users
