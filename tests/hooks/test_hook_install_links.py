"""`hooks install | uninstall`: symbolic links in a project refused, a user's link written
through, every backup 0600 (a settings file may hold secrets)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from neotoma_agent.cli import main

SECRET = '{"OPENAI_API_KEY": "sk-secret-do-not-copy"}'
#: harness -> its project settings file, relative to the project
PROJECT_FILES = {
    "claude-code": ".claude/settings.local.json",
    "codex": ".codex/hooks.json",
    "cursor": ".cursor/hooks.json",
}
#: harness -> its user settings file, relative to $HOME
USER_FILES = {
    "claude-code": ".claude/settings.json",
    "codex": ".codex/hooks.json",
    "cursor": ".cursor/hooks.json",
}


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "NEOTOMA_URL", "NEOTOMA_AGENT_DB"):
        monkeypatch.delenv(name, raising=False)
    old = os.umask(0o022)
    yield
    os.umask(old)
    structlog.reset_defaults()


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "home" / ".codex" / "auth.json"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(SECRET)
    return secret


def _project_cmd(action: str, harness: str, project: Path, tmp_path: Path) -> list[str]:
    argv = ["hooks", action, harness, "--scope", "project", "--project", str(project)]
    return argv + (["--db", str(tmp_path / "m.db")] if action == "install" else [])


def _nothing_copied(project: Path) -> None:
    for path in project.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert "sk-secret" not in path.read_text(), path


@pytest.mark.parametrize("action", ["install", "uninstall"])
@pytest.mark.parametrize("harness", sorted(PROJECT_FILES))
def test_a_project_settings_file_linked_out_of_the_project_is_refused(
    harness: str, action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = _secret(tmp_path)
    project = tmp_path / "repo"
    settings = project / PROJECT_FILES[harness]
    settings.parent.mkdir(parents=True)
    settings.symlink_to(secret)
    status = main(_project_cmd(action, harness, project, tmp_path))
    err = capsys.readouterr().err
    assert status != 0
    assert "symbolic link" in err
    assert "Traceback" not in err
    assert secret.read_text() == SECRET  # the target untouched
    assert settings.is_symlink()
    _nothing_copied(project)


@pytest.mark.parametrize("harness", sorted(PROJECT_FILES))
def test_a_project_settings_directory_linked_out_of_the_project_is_refused(
    harness: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = _secret(tmp_path)
    project = tmp_path / "repo"
    project.mkdir()
    # `.codex` -> ~/.codex: the file name is the harness's own, the directory is the link.
    linked = project / PROJECT_FILES[harness].split("/")[0]
    linked.symlink_to(secret.parent, target_is_directory=True)
    (secret.parent / Path(PROJECT_FILES[harness]).name).write_text(SECRET)
    before = sorted(p.name for p in secret.parent.iterdir())
    status = main(_project_cmd("install", harness, project, tmp_path))
    assert status != 0
    assert "symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in secret.parent.iterdir()) == before  # no backup, no write
    _nothing_copied(project)


def test_a_project_link_that_stays_inside_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A link is refused whatever it points at: the check does not depend on reading it.
    project = tmp_path / "repo"
    (project / ".codex").mkdir(parents=True)
    (project / "shared.json").write_text("{}")
    (project / ".codex" / "hooks.json").symlink_to(project / "shared.json")
    assert main(_project_cmd("install", "codex", project, tmp_path)) != 0
    assert (project / "shared.json").read_text() == "{}"


@pytest.mark.parametrize("harness", sorted(USER_FILES))
def test_a_user_settings_file_that_is_a_link_is_written_through(
    harness: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dotfiles = tmp_path / "dotfiles" / "settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"model": "opus"}))
    link = tmp_path / "home" / USER_FILES[harness]
    link.parent.mkdir(parents=True)
    link.symlink_to(dotfiles)
    assert main(["hooks", "install", harness, "--db", str(tmp_path / "m.db")]) == 0
    assert link.is_symlink()  # still the person's link, not a plain file in its place
    data = json.loads(dotfiles.read_text())
    assert data.get("model") == "opus"
    assert data["hooks"]
    assert main(["hooks", "uninstall", harness]) == 0
    assert link.is_symlink()
    assert "hooks" not in json.loads(dotfiles.read_text())


@pytest.mark.parametrize("harness", sorted(USER_FILES))
def test_every_backup_is_owner_only(
    harness: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / USER_FILES[harness]
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"env": {"TOKEN": "secret"}}))
    settings.chmod(0o644)
    assert main(["hooks", "install", harness, "--db", str(tmp_path / "m.db")]) == 0
    assert main(["hooks", "uninstall", harness]) == 0
    backups = sorted(settings.parent.glob("*.bak"))
    assert len(backups) == 2  # the install's and the uninstall's: none overwritten
    for backup in backups:
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600, backup


def test_a_link_planted_at_the_backup_name_is_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "repo"
    settings = project / ".codex" / "hooks.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{}")
    victim = tmp_path / "victim"  # does not exist: the link dangles
    settings.with_name("hooks.json.neotoma-agent.bak").symlink_to(victim)
    assert main(_project_cmd("install", "codex", project, tmp_path)) == 0
    assert not victim.exists()
    assert (settings.parent / "hooks.json.neotoma-agent.1.bak").read_text() == "{}"


def test_a_deeply_nested_settings_file_is_one_line_of_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / ".codex" / "hooks.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["hooks", "install", "codex", "--db", str(tmp_path / "m.db")]) != 0
    err = capsys.readouterr().err
    assert "not JSON" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the error and its hint
