"""``neotoma_agent.files``: a tool writes what it read from a store owner-only, as the
library writes its own files, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from neotoma_agent.files import (
    DIR_MODE,
    FILE_MODE,
    private_dir,
    private_file,
    replace_private,
    write_private,
)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    # the most permissive umask: every mode below is the library's doing, not the umask's
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_directory_is_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "exports" / "2026"
    private_dir(target)
    assert _mode(target) == DIR_MODE == 0o700  # its missing parents as mkdir -p makes them
    target.chmod(0o755)
    private_dir(target)
    assert _mode(target) == 0o755  # a directory the user named keeps its mode
    private_dir(target, tighten=True)
    assert _mode(target) == 0o700


def test_a_replaced_file_is_whole_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text("old")
    path.chmod(0o644)
    replace_private(path, b'{"conversation_id": "support-42"}')
    assert path.read_bytes() == b'{"conversation_id": "support-42"}'
    assert _mode(path) == FILE_MODE == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no temporary left


def test_a_failed_replace_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    replace_private(path, b"kept")
    with pytest.raises(TypeError):
        replace_private(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_write_private_truncates_or_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a much longer old content")
    path.chmod(0o666)
    write_private(path, b"new")
    assert (path.read_bytes(), _mode(path)) == (b"new", 0o600)
    with pytest.raises(FileExistsError):
        write_private(path, b"other", exclusive=True)
    assert path.read_bytes() == b"new"


def test_private_file_creates_or_tightens_with_sqlite_sidecars(tmp_path: Path) -> None:
    fresh = tmp_path / "new.db"
    private_file(fresh)
    assert (fresh.read_bytes(), _mode(fresh)) == (b"", 0o600)
    old = tmp_path / "old.db"
    for path in (old, tmp_path / "old.db-wal", tmp_path / "old.db-shm"):
        path.write_bytes(b"x")
        path.chmod(0o644)
    private_file(old)
    assert {p.name: _mode(p) for p in tmp_path.glob("old.db*")} == {
        "old.db": 0o600,
        "old.db-wal": 0o600,
        "old.db-shm": 0o600,
    }
