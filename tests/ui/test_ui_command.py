"""``neotoma-agent ui`` and ``serve``'s /ui/ as real processes on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

pytest.importorskip("jinja2", reason="the web view needs the ui extra (jinja2)")

from cli_support import assert_one_line_error, clean_env, cli, default_sigint, serving

from neotoma_agent import EmbeddedStore, NeotomaMemory


def _seed(db: Path) -> None:
    async def main() -> None:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store, conversation_id="ui-chat")
            await memory.record_turn("hello", "hi there", turn_id="t1", retrieve=False)

    anyio.run(main)


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


def test_ui_serves_the_store_read_only_and_stops_on_sigint(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    before = db.stat().st_mtime_ns
    proc = subprocess.Popen(
        [sys.executable, "-m", "neotoma_agent.cli", "ui", "--db", str(db), "--port", "0"],
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("web view on http://127.0.0.1:"), line
        page = line.split()[3].rstrip(";")
        status, html = _get(page + "conversation?id=ui-chat")
        assert status == 200
        assert "hi there" in html
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hung server
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert db.stat().st_mtime_ns == before  # read-only


def test_ui_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    result = cli("ui", "--db", str(db), "--host", "0.0.0.0", home=tmp_path)
    assert_one_line_error(result, "--ui-token")


def test_serve_mounts_the_view_under_ui_behind_the_same_token(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    with serving(db, tmp_path, token="tok-123") as url:
        assert _get(f"{url}/ui/")[0] == 401
        status, html = _get(f"{url}/ui/conversation?id=ui-chat", token="tok-123")
        assert status == 200
        assert "hi there" in html
        # The REST routes keep their own rule (a bearer token, no cookie) beside it.
        request = urllib.request.Request(
            f"{url}/retrieve_entity_by_identifier", data=b'{"identifier": "x"}', method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        refused.value.close()
        assert refused.value.code == 401
