"""`serve` always requires a token: one made per start, kept where only its account reads it.

Real `serve` processes on 127.0.0.1. Loopback is not a user boundary: the last test runs a
second local account (a throwaway user, as root) against the server and its token file.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, cli, ok, server_token, serving

from neotoma_agent.cli._tokens import read_token_file, token_for_url

_TOKENS = Path("data") / "neotoma-agent" / "tokens"


def test_serve_makes_a_token_keeps_it_0600_and_clients_find_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with serving(db, tmp_path) as url:
        port = url.rsplit(":", 1)[1]
        path = tmp_path / _TOKENS / port
        token = server_token(url, tmp_path)
        assert len(token) >= 40
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700  # the data directory
        # Found without being told: the same account, a loopback URL.
        assert json.loads(ok(cli("stats", "--json", "--url", url, home=tmp_path)))["turns"] == 0
        # Elsewhere (another data directory): the file, or the environment, not argv.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        assert_one_line_error(cli("stats", "--url", url, home=elsewhere), "refused")
        ok(cli("stats", "--url", url, "--token-file", str(path), home=elsewhere))
        ok(cli("stats", "--url", url, home=elsewhere, env={"NEOTOMA_TOKEN": token}))
        wrong = elsewhere / "wrong.token"
        wrong.write_text("not-it\n")
        assert_one_line_error(
            cli("stats", "--url", url, "--token-file", str(wrong), home=elsewhere), "refused"
        )
    assert not path.exists()  # a stopped server leaves no token behind


def test_serve_prints_the_login_link_of_a_new_token(tmp_path: Path) -> None:
    serve = ["serve", "--db", str(tmp_path / "m.db"), "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "neotoma_agent.cli", *serve],
        env={**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        serving_line = proc.stdout.readline()
        kept = proc.stdout.readline()
        view = proc.stdout.readline()
        url = serving_line.split(" on ", 1)[1].split()[0]
        token = server_token(url, tmp_path)
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
    assert str(tmp_path / _TOKENS) in kept
    assert view.strip() == f"web view: {url}/ui/?token={token}"


def test_the_token_sources_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("NEOTOMA_TOKEN", raising=False)
    assert token_for_url("http://127.0.0.1:3999") is None
    path = tmp_path / _TOKENS / "3999"
    path.parent.mkdir(parents=True)
    path.write_text("from-file\n")
    assert token_for_url("http://127.0.0.1:3999") == "from-file"
    assert token_for_url("http://localhost:3999") == "from-file"
    # Only a loopback server of this account: a token never goes to another host.
    assert token_for_url("http://example.com:3999") is None
    assert token_for_url("http://127.0.0.1:4000") is None
    assert read_token_file(path) == "from-file"


# --- a second local account ------------------------------------------------------------------


@pytest.fixture
def other_account() -> Iterator[tuple[int, int]]:
    """A throwaway local account (uid, gid), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("a second local account needs root to create (useradd), and we are not")
    if not (shutil.which("useradd") and shutil.which("userdel") and shutil.which("setpriv")):
        pytest.skip("useradd, userdel and setpriv (util-linux) are needed for a second account")
    name = f"nta{secrets.token_hex(4)}"
    created = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if created.returncode != 0:
        pytest.skip(f"useradd could not create a throwaway account: {created.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


_ATTACK = """
import json, sys, urllib.error, urllib.request
url, token_file = sys.argv[1], sys.argv[2]
out = {}
try:
    out["file"] = open(token_file).read()
except OSError as exc:
    out["file"] = type(exc).__name__
request = urllib.request.Request(
    url + "/entities/query", data=b"{}", headers={"Content-Type": "application/json"}
)
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        out["query"] = [answer.status, answer.read().decode()]
except urllib.error.HTTPError as exc:
    out["query"] = [exc.code, ""]
print(json.dumps(out))
"""


def test_another_account_can_neither_call_serve_nor_read_its_token(
    other_account: tuple[int, int],
) -> None:
    uid, gid = other_account
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 in /usr/bin for the second account to run")
    # A home the other account may traverse: only the token's own modes stand in its way.
    home = Path(tempfile.mkdtemp(prefix="neotoma-two-accounts-"))
    try:
        home.chmod(0o755)
        with serving(home / "memory.db", home) as url:
            token_file = home / _TOKENS / url.rsplit(":", 1)[1]

            def attack() -> dict[str, object]:
                become = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
                result = subprocess.run(
                    [*become, python, "-c", _ATTACK, url, str(token_file)],
                    capture_output=True,
                    text=True,
                    env={"PATH": "/usr/bin:/bin", "HOME": "/"},
                    timeout=60,
                )
                assert result.returncode == 0, result.stderr
                answer: dict[str, object] = json.loads(result.stdout)
                return answer

            denied = attack()
            assert denied == {"file": "PermissionError", "query": [401, ""]}
            # Even with the directory opened up, the file's own 0600 holds.
            (home / _TOKENS).chmod(0o711)
            assert attack()["file"] == "PermissionError"
            # The owner reads it, and the server takes it: the refusal above was the token's.
            assert read_token_file(token_file)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _raw_status(url: str, request: bytes) -> int:
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        return int(conn.recv(64).split()[1])


def test_the_serve_process_answers_only_its_own_host(tmp_path: Path) -> None:
    # The whole process as `serve` builds it (REST, the view under /ui/, /health): a page
    # that rebinds evil.example to 127.0.0.1 gets 421 even with the token.
    with serving(tmp_path / "memory.db", tmp_path) as url:
        port = url.rsplit(":", 1)[1]
        auth = f"Authorization: Bearer {server_token(url, tmp_path)}\r\n"
        for path in ("/health", "/entities", "/ui/", "/ui/static/ui.css"):
            for host, status in ((f"evil.example:{port}", 421), (f"127.0.0.1:{port}", 200)):
                request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
                assert _raw_status(url, request.encode()) == status, (path, host)
