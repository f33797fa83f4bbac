"""``neotoma-agent ui`` and ``serve``'s /ui/ as real processes on 127.0.0.1."""

from __future__ import annotations

import http.cookiejar
import signal
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from cli_support import clean_env, default_sigint, serving

from neotoma_agent import EmbeddedStore, NeotomaMemory

#: the command, as a person types it
_UI = [sys.executable, "-m", "neotoma_agent.cli", "ui"]


def _start(tmp_path: Path, argv: list[str]) -> subprocess.Popen[str]:
    """The command running as a person starts it: its own environment, Ctrl-C delivered."""
    return subprocess.Popen(
        argv,
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def _seed(db: Path) -> None:
    async def main() -> None:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="ui-chat")
            await memory.record_turn("hello", "hi there", turn_id="t1", retrieve=False)

    anyio.run(main)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _login(link: str) -> urllib.request.OpenerDirector:
    """A browser-like client logged in through ``link`` (a ``?token=`` link): it keeps the
    cookie the view sets, and the redirect took the token out of the address."""
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with browser.open(link, timeout=10) as answer:
        assert answer.status == 200
        assert "token=" not in answer.url
    [cookie] = list(jar)
    assert cookie.has_nonstandard_attr("HttpOnly")
    return browser


def test_ui_serves_the_store_read_only_behind_a_new_token_and_stops_on_sigint(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    before = db.stat().st_mtime_ns
    proc = _start(tmp_path, [*_UI, "--db", str(db), "--port", "0"])
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("web view on http://127.0.0.1:"), line
        page = line.split()[3].rstrip(";")
        kept = proc.stdout.readline()
        link = proc.stdout.readline().split()[-1]
        assert link.startswith(page + "?token="), link
        token = link.split("=", 1)[1]
        # A token made for this start, kept 0600 in a 0700 directory of the data directory.
        path = tmp_path / "data" / "neotoma-agent" / "tokens" / page.split(":")[2].split("/")[0]
        assert str(path) in kept
        assert path.read_text().strip() == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert _get(page + "conversation?id=ui-chat")[0] == 401  # loopback is no exemption
        with _login(link).open(page + "conversation?id=ui-chat", timeout=10) as answer:
            assert "hi there" in answer.read().decode()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert token not in err
    assert not path.exists()  # removed on the way out
    assert db.stat().st_mtime_ns == before  # read-only


def test_serve_mounts_the_view_under_ui_behind_the_same_token(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    with serving(db, tmp_path, token="tok-123") as url:
        assert _get(f"{url}/ui/")[0] == 401
        status, html = _get(f"{url}/ui/conversation?id=ui-chat", token="tok-123")
        assert status == 200
        assert "hi there" in html
        # The login link works under serve too: a redirect without the token, which moved
        # to an HttpOnly, SameSite=Strict cookie that later pages need alone.
        login = urllib.request.Request(f"{url}/ui/conversation?id=ui-chat&token=tok-123")
        with pytest.raises(urllib.error.HTTPError) as redirect:
            urllib.request.build_opener(_NoRedirect).open(login, timeout=10)
        with redirect.value as answer:
            assert answer.code == 303
            assert answer.headers["Location"] == "/ui/conversation?id=ui-chat"
            cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert _get(f"{url}/ui/?token=wrong")[0] == 401
        browser = _login(f"{url}/ui/?token=tok-123")
        with browser.open(f"{url}/ui/conversation?id=ui-chat", timeout=10) as answer:
            assert "hi there" in answer.read().decode()
        # The REST routes keep their own rule (a bearer token, no cookie) beside it.
        request = urllib.request.Request(
            f"{url}/retrieve_entity_by_identifier", data=b'{"identifier": "x"}', method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        refused.value.close()
        assert refused.value.code == 401


def test_ui_reads_its_token_from_a_file_never_from_argv(tmp_path: Path) -> None:
    """``--ui-token-file``: the token every page needs, out of the process list and output."""
    db = tmp_path / "memory.db"
    _seed(db)
    token = "file-token-" + "x" * 30
    secret = tmp_path / "ui-token"
    secret.write_text(token + "\n")
    secret.chmod(0o600)
    argv = [sys.executable, "-m", "neotoma_agent.cli", "ui", "--db", str(db), "--port", "0"]
    proc = _start(tmp_path, [*argv, "--ui-token-file", str(secret)])
    try:
        assert proc.stdout is not None
        page = proc.stdout.readline().split()[3].rstrip(";")
        kept = proc.stdout.readline()
        link_line = proc.stdout.readline()
        assert "the token you gave" in kept
        assert token not in kept + link_line  # the person has it: never printed
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
        assert _get(page + "conversation?id=ui-chat")[0] == 401
        assert _get(page + "conversation?id=ui-chat", "wrong")[0] == 401
        status, body = _get(page + "conversation?id=ui-chat", token)
        assert (status, "hi there" in body) == (200, True)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert token not in out + err


def test_ui_with_a_missing_token_file_is_one_line_of_error(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [*_UI, "--db", str(db), "--port", "0", "--ui-token-file", str(missing)],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert str(missing) in done.stderr
    assert "--ui-token-file" in done.stderr
    assert "no token file" in done.stderr
    assert "Traceback" not in done.stderr


def test_ui_on_a_port_in_use_says_why_as_serve_does(tmp_path: Path) -> None:
    """``ui`` and ``serve`` read a failed bind alike: the reason and a hint that fits it."""
    db = tmp_path / "memory.db"
    _seed(db)
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*_UI, "--db", str(db), "--port", str(port)],
            env=clean_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        taken.close()
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "hint: is another server running there?" in done.stderr
    assert "stopped" not in done.stderr
    assert "Traceback" not in done.stderr


def test_ui_with_users_shows_each_token_its_user_s_memory(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"

    async def main() -> None:
        async with EmbeddedStore.open(db) as store:
            for user, words in (("alice", "zqaliceqz"), ("bob", "zqbobqz")):
                memory = NeotomaMemory(store.for_user(user), conversation_id=f"chat-{user}")
                await memory.record_turn(f"hello {words}", "hi", turn_id="t1", retrieve=False)

    anyio.run(main)
    users = tmp_path / "users"
    users.write_text("tok-alice-SECRET alice\ntok-bob-SECRET bob\n")
    users.chmod(0o600)
    args = ["ui", "--db", str(db), "--port", "0", "--users", str(users)]
    proc = _start(tmp_path, [sys.executable, "-m", "neotoma_agent.cli", *args])
    try:
        assert proc.stdout is not None
        page = proc.stdout.readline().split()[3].rstrip(";")
        for token, mine, theirs in (
            ("tok-alice-SECRET", "zqaliceqz", "zqbobqz"),
            ("tok-bob-SECRET", "zqbobqz", "zqaliceqz"),
        ):
            status, listing = _get(page + "api/conversations", token)
            assert status == 200
            own = "chat-alice" if mine == "zqaliceqz" else "chat-bob"
            other = "chat-bob" if own == "chat-alice" else "chat-alice"
            assert own in listing
            assert other not in listing
            status, text = _get(page + f"conversation?id={own}", token)
            assert (status, mine in text) == (200, True)
            status, text = _get(page + f"conversation?id={other}", token)
            assert status == 404
            assert theirs not in text
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SECRET" not in err


def test_ui_with_user_shows_that_user_s_memory_alone(tmp_path: Path) -> None:
    """``ui --user USER``: the view's own token shows that user's memory, no other's (and
    not the default user's): listing, pages, search, health."""
    db = tmp_path / "memory.db"

    async def main() -> None:
        async with EmbeddedStore.open(db) as store:
            for user, words in (("alice", "zqaliceqz"), ("bob", "zqbobqz"), (None, "zqlocalqz")):
                view = store if user is None else store.for_user(user)
                memory = NeotomaMemory(view, conversation_id=f"chat-{user}")
                await memory.record_turn(f"hello {words}", "hi", turn_id="t1", retrieve=False)

    anyio.run(main)
    token = "ui-user-token-" + "y" * 30
    secret = tmp_path / "ui-token"
    secret.write_text(token + "\n")
    secret.chmod(0o600)
    args = ["--db", str(db), "--port", "0", "--ui-token-file", str(secret), "--user", "alice"]
    proc = _start(tmp_path, [*_UI, *args])
    try:
        assert proc.stdout is not None
        page = proc.stdout.readline().split()[3].rstrip(";")
        status, listing = _get(page + "api/conversations", token)
        assert status == 200
        assert "chat-alice" in listing
        assert "chat-bob" not in listing
        assert "chat-None" not in listing
        status, text = _get(page + "conversation?id=chat-alice", token)
        assert (status, "zqaliceqz" in text) == (200, True)
        for other, words in (("chat-bob", "zqbobqz"), ("chat-None", "zqlocalqz")):
            status, text = _get(page + f"conversation?id={other}", token)
            assert status == 404
            assert words not in text
            status, text = _get(page + f"api/search?q={other}", token)
            assert status == 200
            assert '"conversation_id": null' in text
        status, text = _get(page + "api/search?q=chat-alice", token)
        assert '"conversation_id": "chat-alice"' in text
        status, text = _get(page + "api/health", token)
        assert '"conversations": 1' in text
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "alice" not in err
