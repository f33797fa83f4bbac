"""``serve --users FILE``: the file of tokens and the users they act for.

Refused, with a message naming the file and the line but never a token, when another
account can read it, when a line is not ``TOKEN USER_ID``, when a user id cannot be one,
when a token is on two lines or is the server's own; comments and blank lines are skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import cli

from neotoma_agent.cli._users_file import UsersFileError, read_users_file

pytestmark = pytest.mark.one_backend

SECRET = "tok-alice-SECRET-7f3a"


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_lines_bind_tokens_to_users(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "users",
        f"# token user\n\n{SECRET} alice@example.com\n  tok-bob\tBob Smith  \n",
    )
    assert read_users_file(path) == {SECRET: "alice@example.com", "tok-bob": "Bob Smith"}


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_file_other_accounts_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = _write(tmp_path / "users", f"{SECRET} alice\n", mode)
    with pytest.raises(UsersFileError, match="readable by other accounts") as caught:
        read_users_file(path)
    assert "chmod 600" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"# users\n{SECRET}\n", "line 2: expected TOKEN USER_ID"),
        (f"tok-x alice\n{SECRET} a\x01b\n", "line 2: a user id must not hold control"),
        (f"{SECRET} alice\n\n{SECRET} bob\n", "line 3: this token is on an earlier line"),
        (f"{SECRET} {'x' * 300}\n", "line 1: a user id must be at most 256"),
        ("# nobody yet\n", "names no user"),
    ],
)
def test_a_bad_line_is_named_by_its_number_never_its_token(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = _write(tmp_path / "users", text)
    with pytest.raises(UsersFileError) as caught:
        read_users_file(path)
    assert problem in str(caught.value)
    assert SECRET not in str(caught.value)
    assert "a\x01b" not in str(caught.value)


def test_serve_refuses_a_bad_users_file_before_listening(tmp_path: Path) -> None:
    users = _write(tmp_path / "users", f"{SECRET} alice\n", 0o644)
    run = cli(
        "serve", "--db", str(tmp_path / "m.db"), "--port", "0", "--users", str(users), home=tmp_path
    )
    assert run.returncode == 1
    assert "readable by other accounts" in run.stderr
    assert SECRET not in run.stderr + run.stdout
    assert not (tmp_path / "m.db").exists()


def test_serve_refuses_a_user_token_that_is_the_admin_s(tmp_path: Path) -> None:
    users = _write(tmp_path / "users", f"{SECRET} alice\n")
    run = cli(
        "serve",
        "--db",
        str(tmp_path / "m.db"),
        "--port",
        "0",
        "--users",
        str(users),
        home=tmp_path,
        env={"NEOTOMA_TOKEN": SECRET},
    )
    assert run.returncode == 1
    assert "the server's own" in run.stderr
    assert SECRET not in run.stderr + run.stdout
