"""Counting instructions with callgrind: how a benchmark's child runs under it, and how its
totals are read back (one place for the three instruction benchmarks).

A marked child calls :func:`start` just before what is counted and :func:`stop` just after:
callgrind zeroes its counts when ``getppid`` is entered and writes a dump when ``getpgrp``
is (two system calls nothing else in a turn makes). Unmarked, the whole process is one
total. Needs valgrind (``apt-get install valgrind``).

Which line of a dump is its count: callgrind zeroes only the thread that calls the
marker, so a whole-process dump's ``summary:`` still holds what the other threads ran
before the zero (for ``turn_instructions.py``'s child, the store thread's share of the
imports, set-up and warm-up: about 516 M instructions, whatever ``--turns``); its
``totals:`` (the sum of its own cost lines) holds the counted turns and only what the calls
in progress at the zero carry (about 15 M: 0.4 M a turn over 40 turns, the same in any
tree). A one-thread dump (``main_thread``) is read by its ``summary:``, zeroed at the mark.
The difference of two children's counts over different numbers of turns cancels both.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

_ZERO_AT = "getppid"
_DUMP_AT = "getpgrp"
_TOTALS = re.compile(r"^totals: (\d+)", re.MULTILINE)
_SUMMARY = re.compile(r"^summary: (\d+)", re.MULTILINE)


def start() -> None:
    """Where a marked child's count starts (callgrind zeroes its counts here)."""
    os.getppid()


def stop() -> None:
    """Where a marked child's count ends (callgrind writes a dump here)."""
    os.getpgrp()


def instructions(
    argv: Sequence[str], *, tree: Path | None = None, marked: bool, main_thread: bool = False
) -> list[int]:
    """Run ``argv`` under callgrind (with ``tree``'s package first on the path, if given):
    the instructions of each span between :func:`start` and :func:`stop`, in the order they
    ran (``marked``), or the whole process's total, alone in the list. ``main_thread``
    (marked only): the spans' instructions on the thread that marks them alone (the event
    loop's, in an async child), not the other threads' (a store's SQLite thread)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    marks = [f"--zero-before={_ZERO_AT}", f"--dump-before={_DUMP_AT}"] if marked else []
    if main_thread:
        # A dump per thread: the marking thread's counts are zeroed and dumped at the marks
        # (``callgrind.out.N-01``, thread 1 being the main one).
        marks.append("--separate-threads=yes")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", *marks, f"--callgrind-out-file={out}", *argv],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Marked: one numbered dump per stop(), and the process's rest at exit (unnumbered).
        pattern = "callgrind.out.*-01" if main_thread else "callgrind.out.*"
        dumps = (
            sorted(Path(tmp).glob(pattern), key=lambda p: int(p.suffix[1:].split("-")[0]))
            if marked
            else [out]
        )
        if not dumps:
            raise RuntimeError("callgrind wrote no dump at a stop()")
        line = _SUMMARY if main_thread else _TOTALS
        totals = []
        for dump in dumps:
            found = line.search(dump.read_text())
            if found is None:
                raise RuntimeError(
                    f"no {line.pattern[1:].split(':')[0]} line in the callgrind dump {dump.name}"
                )
            totals.append(int(found.group(1)))
        return totals
