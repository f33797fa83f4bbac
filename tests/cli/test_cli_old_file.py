"""The read commands on a store file an earlier release wrote (0.2: schema 4, 0.3: schema
6, and schema 7, the users release).

A read command opens its file read-only, which cannot upgrade it: it upgrades the file
first, says so once on stderr, and reads it, for the default user (the file's own memory)
and for a ``--user`` the file has never seen (nothing).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_support import cli, ok

from neotoma_agent.transport.embedded._schema import SCHEMA_VERSION

pytestmark = pytest.mark.one_backend

DATA = Path(__file__).parent.parent / "data"


def _version(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


@pytest.mark.parametrize("version", [4, 6, 7])
def test_read_commands_upgrade_an_older_file_and_read_it_for_any_user(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "old.db"
    shutil.copyfile(DATA / f"v{version}_store" / "store.db", db)
    assert _version(db) == version

    first = cli("stats", "--json", "--db", str(db), "--user", "alice", home=tmp_path)
    assert json.loads(ok(first))["conversations"] == 0  # alice: nothing of the file's
    assert "upgraded the store file" in first.stderr
    assert _version(db) == SCHEMA_VERSION

    for command in (
        ["show", "--json"],
        ["export"],
        ["audit", "--json", "--min-age", "0"],
        ["search", "Acme", "--json"],
    ):
        run = cli(*command, "--db", str(db), "--user", "alice", home=tmp_path)
        assert run.returncode == 0, (command, run.stderr)
        assert "upgraded" not in run.stderr  # once only
        assert "Acme" not in run.stdout.replace('"Acme"', "")  # the query echoed, no hit

    # The default user's memory is the file's, as recorded.
    shown = json.loads(ok(cli("show", "--json", "--db", str(db), home=tmp_path)))
    assert {c["conversation_id"] for c in shown} == {"chat-v2", "migrate-1"}
    found = json.loads(ok(cli("search", "Acme", "--json", "--db", str(db), home=tmp_path)))
    assert found["hits"]
