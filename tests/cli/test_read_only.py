"""Reading commands (``show``, ``stats``, ``audit``) work on a store they cannot write.

The commands run as a user without write access: in a user namespace (``unshare --user``),
where even root's files obey their mode bits, on a store file made 0444 in a directory made
0555. Skipped, saying why, where user namespaces are not available.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import clean_env, cli, ok

from neotoma_agent import EmbeddedStore, NeotomaMemory

pytestmark = pytest.mark.anyio

UNSHARE = shutil.which("unshare")


def _can_run_unprivileged(cwd: Path) -> bool:
    if UNSHARE is None:
        return False
    probe = subprocess.run(
        [UNSHARE, "--user", sys.executable, "-c", "import neotoma_agent"],
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory any user can enter (pytest's own tmp dirs are owner-only)."""
    path = Path(tempfile.mkdtemp(prefix="neotoma-ro-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o755)
        shutil.rmtree(path)


def _unprivileged(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert UNSHARE is not None
    return subprocess.run(
        [UNSHARE, "--user", sys.executable, "-m", "neotoma_agent", *args],
        capture_output=True,
        text=True,
        env=clean_env(cwd),
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_show_stats_and_audit_read_a_store_they_cannot_write(world_dir: Path) -> None:
    if not _can_run_unprivileged(world_dir):
        pytest.skip("needs unshare --user (user namespaces) to run as a user without access")
    db = world_dir / "store.db"
    ok(cli("demo", "--db", str(db), home=world_dir))
    before = db.read_bytes()
    db.chmod(0o444)
    world_dir.chmod(0o555)
    denied = _unprivileged("chat", "--db", str(db), cwd=world_dir)
    assert denied.returncode != 0  # writing really is refused here
    shown = {}
    for command in (["show", "demo"], ["show"], ["stats"], ["audit", "--min-age", "0"]):
        result = _unprivileged(*command, "--db", str(db), cwd=world_dir)
        assert result.returncode == 0, (command, result.stderr)
        assert "readonly" not in result.stderr
        assert result.stdout
        shown[" ".join(command)] = result.stdout
    assert "Great news: we just signed Acme Corp!" in shown["show demo"]
    assert db.read_bytes() == before
    assert sorted(p.name for p in world_dir.iterdir()) == ["store.db"]


async def test_a_read_only_store_refuses_writes_before_touching_the_file(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    async with EmbeddedStore.open(db) as store:
        await NeotomaMemory(store, conversation_id="c").record_turn("hi", "hello", turn_id="t1")
    before = db.read_bytes()
    async with EmbeddedStore.open(db, read_only=True) as store:
        assert (await store.query_entities(entity_type="conversation_message")).total == 2
        with pytest.raises(PermissionError, match="read-only"):
            await store.store([{"entity_type": "note", "title": "x"}], idempotency_key="k")
    assert db.read_bytes() == before


def test_a_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        EmbeddedStore.open(tmp_path / "absent.db", read_only=True)
    assert list(tmp_path.iterdir()) == []
