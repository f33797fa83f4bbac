"""Migration scripts are split into statements by SQLite's own rules."""

from __future__ import annotations

import sqlite3

from neotoma_agent.transport.embedded._schema import MIGRATIONS, _statements


def test_a_semicolon_in_a_comment_or_string_does_not_split() -> None:
    script = "CREATE TABLE a (x TEXT DEFAULT 'p;q'); -- why; because\nCREATE TABLE b (y)"
    statements = _statements(script)
    assert len(statements) == 2
    conn = sqlite3.connect(":memory:")
    for statement in statements:
        conn.execute(statement)
    assert conn.execute("INSERT INTO a DEFAULT VALUES RETURNING x").fetchone() == ("p;q",)


def test_every_shipped_migration_runs_statement_by_statement() -> None:
    conn = sqlite3.connect(":memory:")
    for script in MIGRATIONS:
        for statement in _statements(script):
            conn.execute(statement)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"entities", "observations", "relationships", "name_index"} <= names
