"""`hooks install` run again over an install an older version made, its token in argv.

What matters, for Claude Code, Codex and Cursor, at user and project scope: afterwards the
token is in no hook command and no file of the settings directory (backups included), the
commands are ours and current (one per event, not doubled), and at user scope the hooks
still reach the server (the token moved to a 0600 file the commands name); at project
scope it is not moved anywhere shared (the hooks read ``$NEOTOMA_TOKEN``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from neotoma_agent.cli import main
from neotoma_agent.hooks import harness_module, install, installed

SECRET = "tok-old-install-secret"
URL = "http://127.0.0.1:3080"
HARNESSES = ["claude-code", "codex", "cursor"]


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "NEOTOMA_URL", "NEOTOMA_AGENT_DB"):
        monkeypatch.delenv(name, raising=False)
    yield
    structlog.reset_defaults()


def _argvs(harness: str, path: Path) -> list[list[str]]:
    return [shlex.split(c) for c in installed(harness, path).values()]


@pytest.mark.parametrize("scope", ["user", "project"])
@pytest.mark.parametrize("harness", HARNESSES)
def test_reinstalling_takes_an_old_token_out_of_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], harness: str, scope: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = harness_module(harness).settings_path(scope, project)
    old = ["--url", URL, "--token", SECRET]
    install(
        harness, path, old, python=sys.executable, project=project if scope == "project" else None
    )
    assert SECRET in path.read_text()
    events = set(installed(harness, path))

    where = ["--scope", "project", "--project", str(project)] if scope == "project" else []
    status = main(["hooks", "install", harness, "--url", URL, *where])
    captured = capsys.readouterr()

    assert status == 0, captured.err
    assert "updated" in captured.out
    assert SECRET not in captured.out + captured.err
    assert set(installed(harness, path)) == events  # every event still ours, once
    for argv in _argvs(harness, path):
        assert "--token" not in argv
        assert SECRET not in argv
        assert argv[argv.index("--url") + 1] == URL
    # No file beside the settings (a backup is one) still holds the token.
    for near in path.parent.iterdir():
        if near.is_file():
            assert SECRET not in near.read_text(errors="replace"), near.name
    token_file = tmp_path / "data" / "neotoma-agent" / "tokens" / f"hooks-{harness}"
    if scope == "user":
        assert token_file.read_text().strip() == SECRET
        assert token_file.stat().st_mode & 0o777 == 0o600
        for argv in _argvs(harness, path):
            assert argv[argv.index("--token-file") + 1] == str(token_file)
    else:
        assert not token_file.exists()  # a project's hooks take $NEOTOMA_TOKEN
        for argv in _argvs(harness, path):
            assert "--token-file" not in argv
        assert "NEOTOMA_TOKEN" in captured.out


@pytest.mark.parametrize("harness", HARNESSES)
def test_reinstalling_twice_changes_nothing_the_second_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], harness: str
) -> None:
    path = harness_module(harness).settings_path("user", tmp_path)
    install(harness, path, ["--url", URL, "--token", SECRET], python=sys.executable)
    assert main(["hooks", "install", harness, "--url", URL]) == 0
    text = path.read_text()
    capsys.readouterr()
    assert main(["hooks", "install", harness, "--url", URL]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert path.read_text() == text
    token_file = tmp_path / "data" / "neotoma-agent" / "tokens" / f"hooks-{harness}"
    assert token_file.read_text().strip() == SECRET  # still the token, untouched
    for argv in _argvs(harness, path):
        assert argv[argv.index("--token-file") + 1] == str(token_file)


@pytest.mark.parametrize("harness", HARNESSES)
def test_reinstalling_keeps_a_token_file_given_at_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], harness: str
) -> None:
    mine = tmp_path / "my.token"
    mine.write_text(SECRET + "\n")
    path = harness_module(harness).settings_path("user", tmp_path)
    assert main(["hooks", "install", harness, "--url", URL, "--token-file", str(mine)]) == 0
    assert main(["hooks", "install", harness, "--url", URL]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert mine.read_text() == SECRET + "\n"
    for argv in _argvs(harness, path):
        assert argv[argv.index("--token-file") + 1] == str(mine)
    # Another server's install does not inherit it.
    assert main(["hooks", "install", harness, "--url", "http://127.0.0.1:4000"]) == 0
    for argv in _argvs(harness, path):
        assert "--token-file" not in argv


@pytest.mark.parametrize("harness", HARNESSES)
def test_uninstalling_an_old_install_leaves_no_token_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], harness: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = harness_module(harness).settings_path("project", project)
    install(
        harness, path, ["--url", URL, "--token", SECRET], python=sys.executable, project=project
    )
    where = ["--scope", "project", "--project", str(project)]
    assert main(["hooks", "uninstall", harness, *where]) == 0
    assert "removed" in capsys.readouterr().out
    for near in path.parent.iterdir():
        assert SECRET not in near.read_text(errors="replace"), near.name
