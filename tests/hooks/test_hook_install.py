"""`hooks install | uninstall | status`: merged with what is there, backed up, idempotent."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hook_support import Hooks, recorded

from neotoma_agent.cli import main
from neotoma_agent.hooks import InstallError, install

OTHER = {"type": "command", "command": "/usr/local/bin/lint-check --fast"}


@pytest.fixture(autouse=True)
def _cli_logging() -> Iterator[None]:
    # main() configures structlog for the command line, on this test's captured stderr.
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "NEOTOMA_URL", "NEOTOMA_AGENT_DB"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


def commands(data: dict[str, Any], event: str) -> list[str]:
    return [h["command"] for group in data["hooks"].get(event, []) for h in group["hooks"]]


def test_install_merges_backs_up_and_changes_nothing_the_second_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    original = {
        "model": "opus",
        "hooks": {
            "Stop": [{"hooks": [OTHER]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [OTHER]}],
        },
    }
    settings.write_text(json.dumps(original))
    db = tmp_path / "memory.db"
    status, out = run(capsys, "hooks", "install", "claude-code", "--db", str(db))
    assert status == 0
    assert "added UserPromptSubmit" in out
    assert f"store: {db}" in out
    data = json.loads(settings.read_text())
    assert data["model"] == "opus"
    assert data["hooks"]["PreToolUse"] == original["hooks"]["PreToolUse"]
    stop = commands(data, "Stop")
    assert stop[0] == OTHER["command"]  # the other tool's hook kept, first
    assert shlex.split(stop[1]) == [
        sys.executable, "-m", "neotoma_agent", "hook", "claude-code", "Stop", "--db", str(db)
    ]  # fmt: skip
    backup = settings.with_name("settings.json.neotoma-agent.bak")
    assert json.loads(backup.read_text()) == original

    text = settings.read_text()
    status, out = run(capsys, "hooks", "install", "claude-code", "--db", str(db))
    assert "nothing changed" in out
    assert settings.read_text() == text

    status, out = run(capsys, "hooks", "install", "claude-code", "--db", str(tmp_path / "b.db"))
    assert "updated Stop" in out
    assert len(commands(json.loads(settings.read_text()), "Stop")) == 2  # replaced, not added


def test_uninstall_keeps_every_other_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    original = {"hooks": {"Stop": [{"hooks": [OTHER]}]}, "theme": "dark"}
    settings.write_text(json.dumps(original))
    run(capsys, "hooks", "install", "claude-code", "--db", str(tmp_path / "m.db"))
    status, out = run(capsys, "hooks", "uninstall", "claude-code")
    assert status == 0
    assert "removed Stop" in out
    assert json.loads(settings.read_text()) == original
    status, out = run(capsys, "hooks", "uninstall", "claude-code")
    assert "nothing changed" in out


def test_no_backup_overwrites_an_earlier_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    original = {"hooks": {"Stop": [{"hooks": [OTHER]}]}, "theme": "dark"}
    settings.write_text(json.dumps(original))
    run(capsys, "hooks", "install", "claude-code", "--db", str(tmp_path / "m.db"))
    installed = settings.read_text()
    _, out = run(capsys, "hooks", "uninstall", "claude-code")
    first = settings.with_name("settings.json.neotoma-agent.bak")
    second = settings.with_name("settings.json.neotoma-agent.1.bak")
    # The file as it was before neotoma-agent first touched it is kept; each later change
    # gets the next number, named in what the command prints.
    assert json.loads(first.read_text()) == original
    assert second.read_text() == installed
    assert f"(backup: {second})" in out
    run(capsys, "hooks", "install", "claude-code", "--db", str(tmp_path / "m.db"))
    third = settings.with_name("settings.json.neotoma-agent.2.bak")
    assert json.loads(third.read_text()) == original
    assert json.loads(first.read_text()) == original


def test_project_scope_writes_the_per_person_settings_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    status, _ = run(
        capsys, "hooks", "install", "claude-code", "--scope", "project",
        "--project", str(project), "--db", str(tmp_path / "m.db"),
    )  # fmt: skip
    assert status == 0
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert set(data["hooks"]) == {
        "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "StopFailure",
            "Interrupt",
        "SessionEnd",
    }  # fmt: skip
    assert not (tmp_path / "home" / ".claude").exists()


def test_codex_and_cursor_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    run(capsys, "hooks", "install", "codex", "--db", db)
    codex = json.loads((tmp_path / "home" / ".codex" / "hooks.json").read_text())
    assert set(codex["hooks"]) == {
        "UserPromptSubmit",
        "PostToolUse",
        "Stop",
        "StopFailure",
        "SessionEnd",
    }
    assert codex["hooks"]["Stop"][0]["hooks"][0]["type"] == "command"
    cursor_file = tmp_path / "home" / ".cursor" / "hooks.json"
    cursor_file.parent.mkdir(parents=True)
    cursor_file.write_text(json.dumps({"version": 1, "hooks": {"stop": [{"command": "x.sh"}]}}))
    run(capsys, "hooks", "install", "cursor", "--db", db)
    cursor = json.loads(cursor_file.read_text())
    assert cursor["version"] == 1
    assert cursor["hooks"]["stop"][0] == {"command": "x.sh"}
    assert "hook cursor stop" in cursor["hooks"]["stop"][1]["command"]
    assert "hook cursor afterAgentResponse" in cursor["hooks"]["afterAgentResponse"][0]["command"]


@pytest.mark.parametrize(
    ("harness", "original"),
    [
        ("codex", {"hooks": {"Stop": [{"hooks": [OTHER]}]}}),
        ("cursor", {"version": 1, "hooks": {"stop": [{"command": "x.sh"}]}}),
    ],
)
def test_codex_and_cursor_uninstall_in_project_scope_keeps_the_rest(
    harness: str, original: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "repo"
    settings = project / f".{harness}" / "hooks.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(original))
    scope = ("--scope", "project", "--project", str(project))
    status, out = run(capsys, "hooks", "install", harness, *scope, "--db", str(tmp_path / "m.db"))
    assert status == 0
    assert f"wrote {settings}" in out
    assert json.loads(settings.read_text()) != original
    status, out = run(capsys, "hooks", "status", harness, *scope, "--json")
    assert json.loads(out)["missing"] == []
    status, out = run(capsys, "hooks", "uninstall", harness, *scope)
    assert status == 0
    assert "removed" in out
    assert json.loads(settings.read_text()) == original
    assert not (tmp_path / "home" / f".{harness}").exists()  # the user's file untouched
    _, out = run(capsys, "hooks", "uninstall", harness, *scope)
    assert "nothing changed" in out


def test_a_url_store_is_named_and_a_token_from_the_environment_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEOTOMA_TOKEN", "tok-secret")
    status, out = run(capsys, "hooks", "install", "codex", "--url", "http://127.0.0.1:3080")
    assert status == 0
    text = (tmp_path / "home" / ".codex" / "hooks.json").read_text()
    assert "--url http://127.0.0.1:3080" in text
    assert "tok-secret" not in text + out
    assert "token from $NEOTOMA_TOKEN" in out


def test_a_store_file_from_the_environment_is_named_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As elsewhere, $NEOTOMA_AGENT_DB names the store when --db is not given; the hooks get
    # it fixed now, since the harness runs them in an environment of its own.
    db = tmp_path / "env.db"
    monkeypatch.setenv("NEOTOMA_AGENT_DB", str(db))
    status, out = run(capsys, "hooks", "install", "claude-code")
    assert status == 0
    assert f"store: {db}" in out
    settings = json.loads((tmp_path / "home" / ".claude" / "settings.json").read_text())
    assert shlex.split(commands(settings, "Stop")[0])[-2:] == ["--db", str(db)]


def test_a_settings_file_that_is_not_json_is_left_alone(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text("{ // a comment\n}")
    with pytest.raises(InstallError, match="is not JSON"):
        install("claude-code", settings, ["--db", "m.db"], python=sys.executable)
    assert settings.read_text() == "{ // a comment\n}"


def test_a_settings_file_that_is_no_json_object_is_left_alone(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text('["hooks"]')
    with pytest.raises(
        InstallError, match=r"is a JSON list, not an object; fix or move it, then run this again"
    ):
        install("claude-code", settings, ["--db", "m.db"], python=sys.executable)
    assert settings.read_text() == '["hooks"]'


def test_status_says_what_is_installed_and_when_it_fired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.db"
    db = tmp_path / "memory.db"
    _, out = run(capsys, "hooks", "status", "claude-code", "--state", str(state))
    assert "not installed" in out
    run(capsys, "hooks", "install", "claude-code", "--db", str(db), "--state", str(state))
    Hooks(tmp_path, "claude-code").replay(recorded("claude-code", "completed"))
    _, out = run(capsys, "hooks", "status", "claude-code", "--state", str(state), "--json")
    report = json.loads(out)
    assert report["missing"] == []
    assert report["events"]["Stop"]["runs"] == 1
    assert "PostToolUse" not in report["events"]
    assert report["turns"] == {"open": 0, "undelivered": 0, "done": 1}
    _status, out = run(capsys, "hooks", "status", "claude-code", "--state", str(state))
    assert "hooks installed" in out
    assert "PostToolUse" in out
    assert "never fired" in out


def test_a_codex_project_install_says_codex_reads_it_only_in_a_trusted_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "repo"
    db = str(tmp_path / "m.db")
    scope = ("--scope", "project", "--project", str(project))
    status, out = run(capsys, "hooks", "install", "codex", *scope, "--db", db)
    assert status == 0
    trust = [line for line in out.splitlines() if "trusted project" in line]
    assert len(trust) == 1
    assert "config.toml" in trust[0]
    # Not for the user's file (read in every project), nor for another harness's project.
    _, out = run(capsys, "hooks", "install", "codex", "--db", db)
    assert "trusted project" not in out
    _, out = run(capsys, "hooks", "install", "cursor", *scope, "--db", db)
    assert "trusted project" not in out


# --- tokens stay out of argv and out of shared files --------------------------------------------

SECRET = "tok-secret-not-in-argv"
URL = "http://127.0.0.1:3080"


def _all_commands(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    return [h["command"] for groups in data["hooks"].values() for g in groups for h in g["hooks"]]


def test_a_token_given_at_install_goes_to_a_0600_file_the_command_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(capsys, "hooks", "install", "codex", "--url", URL, "--token", SECRET)
    assert status == 0
    settings = tmp_path / "home" / ".codex" / "hooks.json"
    assert SECRET not in settings.read_text() + out
    token_file = tmp_path / "data" / "neotoma-agent" / "tokens" / "hooks-codex"
    assert token_file.read_text().strip() == SECRET
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.parent.stat().st_mode & 0o777 == 0o700
    for command in _all_commands(settings):
        argv = shlex.split(command)
        assert "--token" not in argv
        assert argv[argv.index("--token-file") + 1] == str(token_file)
    assert f"token in {token_file}" in out


def test_a_token_file_given_at_install_is_named_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "my.token"
    mine.write_text(SECRET)
    status, _ = run(capsys, "hooks", "install", "cursor", "--url", URL, "--token-file", str(mine))
    assert status == 0
    settings = tmp_path / "home" / ".cursor" / "hooks.json"
    data = json.loads(settings.read_text())
    commands = [e["command"] for entries in data["hooks"].values() for e in entries]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[argv.index("--token-file") + 1] == str(mine)
        assert "--token" not in argv


def test_project_scope_refuses_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    status = main(
        ["hooks", "install", "cursor", "--scope", "project", "--project", str(project),
         "--url", URL, "--token", SECRET]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert status == 1
    assert "shared" in captured.err
    assert SECRET not in captured.err + captured.out
    assert not (project / ".cursor").exists()


def test_reinstalling_moves_an_old_token_out_of_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An install as the previous version wrote it: the token in every command's argv.
    settings = tmp_path / "home" / ".claude" / "settings.json"
    old = [sys.executable, "-m", "neotoma_agent", "hook", "claude-code"]
    install("claude-code", settings, ["--url", URL, "--token", SECRET], python=sys.executable)
    assert SECRET in settings.read_text()
    assert shlex.join(old) in settings.read_text()
    status, out = run(capsys, "hooks", "install", "claude-code", "--url", URL)
    assert status == 0
    text = settings.read_text()
    assert SECRET not in text
    assert "updated" in out
    token_file = tmp_path / "data" / "neotoma-agent" / "tokens" / "hooks-claude-code"
    assert token_file.read_text().strip() == SECRET
    for command in _all_commands(settings):
        assert "--token-file" in shlex.split(command)


def test_an_installed_command_reaches_a_served_store_through_its_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command `hooks install --token` wrote, run as the harness runs it, against a
    # real `serve` that requires the token: the turn is stored, the token never in argv.
    from cli_support import cli, serving

    served = tmp_path / "served.db"
    home = tmp_path / "home"
    home.mkdir()
    with serving(served, home, token=SECRET) as url:
        installed = run(capsys, "hooks", "install", "claude-code", "--url", url, "--token", SECRET)
        assert installed[0] == 0
        settings = home / ".claude" / "settings.json"
        commands = json.loads(settings.read_text())["hooks"]
        state = str(tmp_path / "state.db")
        for event, payload in recorded("claude-code", "completed"):
            [group] = commands[event]
            argv = shlex.split(group["hooks"][0]["command"])
            assert SECRET not in argv
            hook_args = argv[argv.index("hook") :]
            result = cli(*hook_args, "--state", state, home=home, stdin=json.dumps(payload))
            assert result.returncode == 0
            assert result.stderr == "", result.stderr
        session = recorded("claude-code", "completed")[0][1]["session_id"]
        shown = cli("show", f"claude-code-{session}", "--json", "--url", url, home=home)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["turns"][0]["status"] == "completed"


def test_an_old_token_is_not_carried_over_to_another_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    install("claude-code", settings, ["--url", URL, "--token", SECRET], python=sys.executable)
    other = "http://127.0.0.1:4000"
    status, _ = run(capsys, "hooks", "install", "claude-code", "--url", other)
    assert status == 0
    assert SECRET not in settings.read_text()
    assert not (tmp_path / "data" / "neotoma-agent" / "tokens" / "hooks-claude-code").exists()
    for command in _all_commands(settings):
        assert "--token-file" not in shlex.split(command)


def test_an_installed_command_with_no_token_finds_the_local_servers_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `serve` made its own token (kept in the data directory); hooks installed with --url
    # alone, no token anywhere in their commands or environment, still store the turn.
    from cli_support import cli, serving

    home = tmp_path / "home"
    home.mkdir()
    with serving(tmp_path / "served.db", home) as url:
        assert run(capsys, "hooks", "install", "claude-code", "--url", url)[0] == 0
        commands = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
        state = str(tmp_path / "state.db")
        for event, payload in recorded("claude-code", "completed"):
            [group] = commands[event]
            argv = shlex.split(group["hooks"][0]["command"])
            assert "--token" not in argv
            assert "--token-file" not in argv
            hook_args = argv[argv.index("hook") :]
            result = cli(*hook_args, "--state", state, home=home, stdin=json.dumps(payload))
            assert result.returncode == 0
            assert result.stderr == "", result.stderr
        session = recorded("claude-code", "completed")[0][1]["session_id"]
        shown = cli("show", f"claude-code-{session}", "--json", "--url", url, home=home)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["turns"][0]["status"] == "completed"


def test_install_with_a_user_names_the_user_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    user = "alice smith@example.com"
    status, _ = run(capsys, "hooks", "install", "claude-code", "--db", str(db), "--user", user)
    assert status == 0
    settings = tmp_path / "home" / ".claude" / "settings.json"
    data = json.loads(settings.read_text())
    installed = [c for event in data["hooks"] for c in commands(data, event)]
    assert installed
    for command in installed:
        words = shlex.split(command)
        assert words[words.index("--user") + 1] == user
    # status reads that user's own state file
    status, out = run(capsys, "hooks", "status", "claude-code", "--user", user, "--json")
    assert status == 0
    assert ".user-" in json.loads(out)["state"]
