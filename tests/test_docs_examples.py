"""Every Python block of README.md and the docs site runs as written, offline.

Each block is run by the rule its comment states (``docs_support``): whole programs and
fragments here, each in a fresh process in a temporary folder, on the embedded store and
with no network; the tour and the framework examples by their own tests, which check what
they print and store; the few that need a server say so and why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import MODES, Block, all_blocks, fragment_program
from paths_support import ROOT

# A fresh interpreter per block: the event loop is the block's own, whatever the backend.
pytestmark = pytest.mark.one_backend

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.mode in ("script", "fragment")]


def test_every_block_says_how_it_is_run() -> None:
    assert len(BLOCKS) >= 15, "the extraction found the docs' blocks"
    for block in BLOCKS:
        assert block.mode in MODES, block.where
        if block.mode == "skip":
            assert len(block.detail) > 10, f"{block.where}: a skip says why"
        if block.mode == "by":
            test = ROOT / block.detail
            assert test.is_file(), f"{block.where}: {block.detail} is not a test file"
            source = test.read_text("utf-8")
            page = (block.path.name, block.path.parent.name)
            assert any(f'"{name}"' in source for name in page), (
                f"{block.where}: {block.detail} does not read this page"
            )
    # Something runs here, and most blocks run somewhere.
    assert RUN
    assert sum(b.mode == "skip" for b in BLOCKS) <= len(BLOCKS) // 3


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_the_block_runs(block: Block, tmp_path: Path) -> None:
    code = block.code if block.mode == "script" else fragment_program(block.code)
    (tmp_path / "block.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEOTOMA", "OTEL_"))}
    done = subprocess.run(
        # a deprecated name in the docs is a failure, not a warning a reader copies
        [sys.executable, "-W", "error::DeprecationWarning", "block.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stderr}"
    assert done.stderr == "", f"{block.where}: the library is silent\n{done.stderr}"
