"""``neotoma-agent chat``: driven through its stdin, and through a terminal for Ctrl-C."""

from __future__ import annotations

import os
import re
import select
import sys
import time
from pathlib import Path

import pytest
from cli_support import TESTS, assert_one_line_error, clean_env, cli, default_sigint, ok, show_json
from proc_support import PROC, until, waits_in

SLOW_AGENT = f"{TESTS / 'cli_agents.py'}:slow_agent"


def test_chat_through_stdin_stores_one_turn_per_line_and_exits_on_eof(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    ok(cli("demo", "--db", str(db), home=tmp_path))
    lines = "What do we know about Acme Corp?\n\n   \nhello there\nIs Ana Lopez at Acme Corp?\n"
    out = ok(cli("chat", "--conversation", "c1", "--db", str(db), home=tmp_path, stdin=lines))
    assert out.count("[stored turn") == 3
    assert "you> What do we know about Acme Corp?\n  memory: Acme Corp (company)\n" in out
    assert "  memory: nothing found for this message\n" in out
    assert "In memory I found: Ana Lopez (person), Acme Corp (company)." in out
    assert f"stored 3 turns; read them back with: neotoma-agent show c1 --db {db}" in out

    turns = show_json(db, "c1", tmp_path)["turns"]
    assert [t["messages"][0]["content"] for t in turns] == [
        "What do we know about Acme Corp?",
        "hello there",
        "Is Ana Lopez at Acme Corp?",
    ]
    assert all(t["status"] == "completed" for t in turns)
    reply = turns[0]["messages"][1]
    assert reply["content"] == (
        'You said: "What do we know about Acme Corp?". In memory I found: Acme Corp (company).'
    )
    assert [r["name"] for r in reply["refers_to"]] == ["Acme Corp"]


def test_chat_escapes_control_sequences_and_stores_the_exact_text(tmp_path: Path) -> None:
    # Issue 10 §8: the echo agent says the line back (as a model steered by it could), and
    # the piped line is echoed: neither may reach the terminal raw.
    db = tmp_path / "memory.db"
    line = "hi \x1b]0;PWNED\x07\x1b[2J \u202eevil"
    result = cli("chat", "--conversation", "c", "--db", str(db), home=tmp_path, stdin=line + "\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out) is None
    assert "you> hi \\x1b]0;PWNED\\x07\\x1b[2J \\u202eevil\n" in out
    assert 'agent> You said: "hi \\x1b]0;PWNED\\x07\\x1b[2J \\u202eevil".' in out
    (turn,) = show_json(db, "c", tmp_path)["turns"]
    assert turn["messages"][0]["content"] == line
    assert line in turn["messages"][1]["content"]


def test_chat_continues_a_conversation(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    for line in ("first\n", "second\n"):
        ok(cli("chat", "--conversation", "c", "--db", str(db), home=tmp_path, stdin=line))
    turns = show_json(db, "c", tmp_path)["turns"]
    assert [t["messages"][0]["content"] for t in turns] == ["first", "second"]


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("cli_agents:sync_agent", "sync reply to 'hi' citing 0"),
        ("cli_agents:async_agent", "async reply to 'hi'"),
    ],
)
def test_chat_loads_an_agent_module(tmp_path: Path, agent: str, expected: str) -> None:
    db = tmp_path / "memory.db"
    out = ok(cli("chat", "--agent", agent, "--db", str(db), home=tmp_path, stdin="hi\n", cwd=TESTS))
    assert f"agent> {expected}\n" in out


def test_a_failing_agent_records_the_turn_abandoned_and_the_loop_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    agent = f"{TESTS / 'cli_agents.py'}:failing_agent"
    out = ok(
        cli(
            "chat",
            "--agent",
            agent,
            "--conversation",
            "f",
            "--db",
            str(db),
            home=tmp_path,
            stdin="one\ntwo\n",
        )
    )
    assert (
        out.count("[agent failed (RuntimeError: the model is down): turn recorded as abandoned")
        == 2
    )
    text = ok(cli("show", "f", "--db", str(db), home=tmp_path))
    assert text.count("ABANDONED (RuntimeError)") == 2
    assert "  assistant: (no reply stored)" in text


def test_a_failing_agent_shows_its_traceback_at_log_level_debug(tmp_path: Path) -> None:
    agent = f"{TESTS / 'cli_agents.py'}:failing_agent"
    args = ("chat", "--agent", agent, "--db", str(tmp_path / "memory.db"))
    quiet = cli(*args, home=tmp_path, stdin="one\n")
    assert "Traceback" not in quiet.stderr
    loud = cli(*args, "--log-level", "debug", home=tmp_path, stdin="one\n")
    assert "turn recorded as abandoned" in ok(loud)
    assert "Traceback (most recent call last)" in loud.stderr
    assert 'cli_agents.py", line' in loud.stderr
    assert "RuntimeError: the model is down" in loud.stderr


def test_a_bad_agent_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    assert_one_line_error(
        cli("chat", "--agent", "no_such_module:f", "--db", str(db), home=tmp_path), "no such module"
    )
    assert_one_line_error(
        cli("chat", "--agent", "cli_agents:nope", "--db", str(db), home=tmp_path, cwd=TESTS),
        "has no 'nope'",
    )
    assert_one_line_error(cli("chat", "--agent", "nocolon", "--db", str(db), home=tmp_path))
    assert not db.exists()


class Terminal:
    """The CLI on the slave side of a pseudo-terminal, as a user at a keyboard sees it."""

    def __init__(self, args: list[str], home: Path) -> None:
        import pty

        self.output = b""
        self._seen = 0
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child
            os.chdir(home)
            default_sigint()
            env = clean_env(home)
            os.execve(sys.executable, [sys.executable, "-m", "neotoma_agent.cli", *args], env)
        self.pid, self.fd = pid, fd

    def _read(self, timeout: float) -> bool:
        """Read what the terminal has within ``timeout``; False once the child closed it."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.output += data
        return bool(data)

    def expect(self, text: str, timeout: float = 15) -> str:
        """Wait until ``text`` appears after what was already matched; return the new output."""
        needle = text.encode()
        deadline = time.monotonic() + timeout
        open_ = True
        while True:
            at = self.output.find(needle, self._seen)
            if at >= 0:
                chunk = self.output[self._seen : at + len(needle)]
                self._seen = at + len(needle)
                return chunk.decode(errors="replace")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not open_:
                seen = self.output.decode(errors="replace")
                raise AssertionError(f"{text!r} not seen in:\n{seen}")
            open_ = self._read(remaining)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def await_key_wait(self) -> None:
        """Wait until the child blocks waiting for a key (in ``select`` on the terminal, as
        readline does once its prompt is drawn).

        CPython's readline acts on a signal that arrives while it still draws the prompt
        only once Enter is pressed, and a key sent then may be lost; once it waits, at once.
        """
        until(lambda: waits_in(self.pid, "select", "poll_schedule"), "chat waiting for a key")

    def wait(self, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.1) and select.select([self.fd], [], [], 0)[0]:
                    pass
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            self._read(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"chat did not exit:\n{self.output.decode(errors='replace')}")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.skipif(not PROC, reason="reads whether the child waits for a key from /proc")
def test_ctrl_c_mid_reply_records_the_turn_abandoned_and_the_loop_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    term = Terminal(
        ["chat", "--agent", SLOW_AGENT, "--conversation", "k", "--db", str(db)], tmp_path
    )
    term.expect("you> ")
    term.send(b"Tell me about Acme Corp\r")
    term.expect("word2 ")  # the reply is streaming
    term.send(b"\x03")  # Ctrl-C, through the terminal's line discipline (SIGINT)
    footer = term.expect("]\r\n")
    assert "[stopped: turn recorded as abandoned; the partial reply" in footer
    assert "^C" not in footer  # the terminal does not echo it into the reply
    term.expect("you> ")  # the loop goes on
    term.await_key_wait()  # a Ctrl-C while readline still draws the prompt waits for Enter
    term.send(b"\x03")  # Ctrl-C at the prompt only discards the line
    term.expect("(Ctrl-D quits)")
    term.expect("you> ")
    term.send(b"again\r")
    term.expect("word0 ")
    term.send(b"\x03")
    term.expect("turn recorded as abandoned")
    term.expect("you> ")
    term.send(b"\x04")  # Ctrl-D: a clean exit
    term.expect("stored 2 turns")
    assert term.wait() == 0
    assert b"Traceback" not in term.output

    turns = show_json(db, "k", tmp_path)["turns"]
    assert [t["status"] for t in turns] == ["abandoned", "abandoned"]
    first = turns[0]
    user, partial = first["messages"]
    assert user["content"] == "Tell me about Acme Corp"
    assert partial["content"].startswith("Thinking about it: word0 word1 word2 ")
    # Exactly what was shown: every stored chunk appeared on the terminal before Ctrl-C.
    assert partial["content"].strip() in term.output.decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.skipif(not PROC, reason="reads whether the child waits for a key from /proc")
def test_chat_edits_lines_with_arrow_keys_and_keeps_history(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    term = Terminal(["chat", "--conversation", "e", "--db", str(db)], tmp_path)
    term.expect("you> ")
    term.send(b"abc\x1b[D\x1b[DX\r")  # type abc, left twice, X: the line is aXbc
    term.expect("you> ")
    term.await_key_wait()  # an arrow key sent while readline still draws the prompt is lost
    term.send(b"\x1b[A\r")  # up: the previous line again
    term.expect("you> ")
    term.send(b"\x04")
    term.expect("stored 2 turns")
    assert term.wait() == 0
    turns = show_json(db, "e", tmp_path)["turns"]
    assert [t["messages"][0]["content"] for t in turns] == ["aXbc", "aXbc"]


def test_chat_shows_which_earlier_turns_each_reply_was_given(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    lines = "first line\nsecond line\nthird line\n"
    out = ok(
        cli(
            "chat",
            "--conversation",
            "h1",
            "--history",
            "1",
            "--db",
            str(db),
            home=tmp_path,
            stdin=lines,
        )
    )
    turns = show_json(db, "h1", tmp_path)["turns"]
    first, second = (t["turn_id"] for t in turns[:2])
    shown = re.findall(r"  history: (.*)\n", out)
    # The first turn has none; then only the one turn before (--history 1).
    assert shown == [first, second]
    out = ok(
        cli(
            "chat",
            "--conversation",
            "h1",
            "--history",
            "0",
            "--db",
            str(db),
            home=tmp_path,
            stdin="fourth\n",
        )
    )
    assert "history:" not in out


def test_chat_refuses_a_negative_history(tmp_path: Path) -> None:
    result = cli("chat", "--history", "-1", "--db", str(tmp_path / "m.db"), home=tmp_path)
    assert_one_line_error(result, "--history")
