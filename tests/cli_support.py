"""Running ``neotoma-agent`` as a user would, with a clean environment and a private home.

:func:`cli` runs the command in this process (``main(argv)`` with its own stdin, stdout,
stderr, environment and working directory, all restored afterwards): about 8 ms a run
instead of a second for a new interpreter. A real process (``subprocess`` with
:func:`clean_env`, or :func:`serving`) is for what only a process shows: signals, Ctrl-C, a
TTY, ``python -m`` and the console script themselves, a server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from paths_support import ROOT, TESTS

__all__ = ["ROOT", "TESTS", "clean_env", "cli", "ok", "serving", "show_json"]


def clean_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without any NEOTOMA_* setting, with a private home directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEOTOMA_")}
    env["HOME"] = str(home)
    env["XDG_DATA_HOME"] = str(home / "data")
    env["PYTHONIOENCODING"] = "utf-8"
    # Coverage of an editable install works from any directory; the tests dir is not
    # on the path, so that `--agent cli_agents:...` is found only when asked for.
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


def cli(
    *args: str,
    home: Path,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``neotoma-agent ARGS`` to completion in this process.

    The command sees what ``python -m neotoma_agent.cli`` would: the environment of
    :func:`clean_env`, ``cwd`` (default ``home``) as its working directory, ``stdin`` as
    a pipe (not a TTY), stdout and stderr as UTF-8 byte streams. Its exit status is what
    ``main`` returns or what ``SystemExit`` carries (argparse's usage errors, ``--help``).
    Everything the run changes in the process is put back: the environment, the working
    directory, ``sys.path``, the standard streams and the CLI's logging configuration.

    Called from a running asyncio loop (an async test), the command runs in a thread of
    its own, since it runs its own loop; the caller's loop waits for it meanwhile, so a
    server on that loop cannot answer it: run ``cli`` through ``anyio.to_thread`` then.
    """
    if asyncio._get_running_loop() is not None:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(cli, *args, home=home, stdin=stdin, env=env, cwd=cwd).result()
    # Imported here: collecting the tests must not import the command line.
    import structlog

    from neotoma_agent.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    streams = (
        io.TextIOWrapper(io.BytesIO((stdin or "").encode("utf-8")), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", newline="\n", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", newline="\n", write_through=True),
    )
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_path = list(sys.path)
    saved_log = structlog.get_config() if structlog.is_configured() else None
    try:
        os.environ.clear()
        os.environ.update(clean_env(home, env))
        os.chdir(cwd or home)
        # `python -m` puts the working directory first on the path; tests/ is not on it.
        sys.path[:] = [str(cwd or home), *(p for p in sys.path if Path(p) != TESTS)]
        sys.stdin, sys.stdout, sys.stderr = streams
        try:
            code: object = main(list(args))
        except SystemExit as exc:
            code = exc.code
        for stream in streams[1:]:
            stream.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        if saved_log is None:
            structlog.reset_defaults()
        else:
            structlog.configure(**saved_log)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(
        ["neotoma-agent", *args],
        returncode,
        out.getvalue().decode("utf-8"),
        err.getvalue().decode("utf-8"),
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that must have succeeded (the run's output on failure)."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def show_json(db: Path, conversation: str, home: Path) -> dict[str, Any]:
    """``show CONVERSATION --json`` on a store file, parsed."""
    value = json.loads(ok(cli("show", conversation, "--json", "--db", str(db), home=home)))
    assert isinstance(value, dict)
    return value


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A user mistake: non-zero exit, one error line (and at most a hint), no traceback."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines, "no error message"
    assert lines[0].startswith("neotoma-agent: error: "), result.stderr
    assert len(lines) <= 2, result.stderr
    if len(lines) == 2:
        assert lines[1].startswith("  hint: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_sigint() -> None:
    """In a child about to run the CLI: Ctrl-C's default disposition. A test runner started
    as a background job ignores SIGINT, its children inherit that, and Python then leaves it
    ignored: a test that interrupts the CLI would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def server_token(url: str, home: Path) -> str:
    """The token ``serve`` (run by :func:`serving` with ``home``) keeps for ``url``'s port."""
    port = url.rsplit(":", 1)[1]
    return (home / "data" / "neotoma-agent" / "tokens" / port).read_text().strip()


@contextmanager
def serving(
    db: Path, home: Path, *, token: str | None = None, extra: Sequence[str] = ()
) -> Iterator[str]:
    """``neotoma-agent serve`` on a free loopback port until the block ends; yields its URL.

    Without ``token`` the server makes one (:func:`server_token` reads it; the CLI run with
    the same ``home`` finds it by itself).
    """
    port = free_port()
    args = [sys.executable, "-m", "neotoma_agent.cli", "serve", "--db", str(db)]
    args += ["--port", str(port), *extra]
    env = clean_env(home, {"NEOTOMA_TOKEN": token} if token else None)
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=home
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # Seconds on an idle machine; a loaded one can take far longer to start Python.
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out, err = proc.communicate(timeout=5)
                    raise AssertionError(f"serve did not start:\n{out}\n{err}") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, f"serve exited {proc.returncode}:\n{out}\n{err}"
    assert "serving" in out
    if token:
        assert token not in out + err
