"""The modules a user message's text passes through, from ``NeotomaMemory.turn()`` to the
INSERT of its observation in an embedded store.

    python benchmarks/user_message_path.py [--json PATH]

How it counts: one turn runs on a fresh store file with a profile hook on every thread
(``sys.setprofile``, ``threading.setprofile``); each call of a function of the package one of
whose arguments (or, for a closure, free variables) holds the text (the ``str`` object
itself, a ``str`` containing it such as a JSON body, or a mapping, sequence or record of the
package holding one, four levels deep) is kept, in call order, up to the first call of the
function that runs the observations' INSERT (``embedded/_write._observe``). The text is
built at run time and matched by identity, so a copy made elsewhere does not count.
The modules are then split in two: ``beside`` the store (the reads that run beside it:
identifier extraction and retrieval; the turn's trace) and on its ``path`` (the rest). A
count depends a little on what the event loop ran before the INSERT (retrieval's tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

#: the function whose call is the INSERT of the message's observation
_INSERT = "_observe"
#: modules whose calls run beside the user store, not on its way (reads, the trace)
_BESIDE = frozenset(
    {
        "neotoma_agent._recall.extract",
        "neotoma_agent._recall.loose",
        "neotoma_agent._recall.ranking",
        "neotoma_agent._recall.retrieval",
        "neotoma_agent._util.otel",
    }
)
#: the enter's reads, run beside its user store
_BESIDE_CALLS = ("Phases.identifiers", "Phases.retrieve", "Phases.history", "Phases.enter.<")

# Built at run time, so that it is one object no literal elsewhere shares.
TEXT = "".join(["a user message on its way ", "about Acme Corp and Jane Doe"])


def _holds(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return value is TEXT or (len(value) > len(TEXT) and TEXT in value)
    if depth >= 4 or value is None or isinstance(value, int | float | bytes):
        return False
    if isinstance(value, dict):
        return any(_holds(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds(v, depth + 1) for v in value)
    kind = type(value)
    if not getattr(kind, "__module__", "").startswith("neotoma_agent"):
        return False
    slots = [s for c in kind.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
    fields = [getattr(value, s, None) for s in slots]
    fields.extend(getattr(value, "__dict__", {}).values())
    return any(_holds(v, depth + 1) for v in fields)


class Recorder:
    """The calls whose arguments hold :data:`TEXT`, in call order (while ``on``)."""

    def __init__(self) -> None:
        self.on = False
        self.calls: list[tuple[str, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.on or event != "call":
            return
        module = frame.f_globals.get("__name__") or ""
        if not module.startswith("neotoma_agent"):
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
        local = frame.f_locals
        if any(_holds(local.get(name)) for name in (*code.co_varnames[:n], *code.co_freevars)):
            self.calls.append((module, getattr(code, "co_qualname", code.co_name)))


def measure() -> dict[str, Any]:
    """One turn, recorded; the modules and functions up to the INSERT, path and beside."""
    recorder = Recorder()
    sys.setprofile(recorder)
    threading.setprofile(recorder)  # the store's thread, started below
    try:
        from neotoma_agent import EmbeddedStore, NeotomaMemory

        async def main() -> None:
            with tempfile.TemporaryDirectory() as tmp:
                async with EmbeddedStore.open(Path(tmp) / "memory.db") as store:
                    memory = NeotomaMemory(store, conversation_id="path-1", platform="bench")
                    async with memory.turn("a first turn") as t:  # imports, warm paths
                        t.reply = "ok"
                    recorder.on = True
                    async with memory.turn(TEXT) as t:
                        recorder.on = False
                        t.reply = "ok"

        anyio.run(main)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    modules: dict[str, list[str]] = {}
    reached = False
    for module, function in recorder.calls:
        functions = modules.setdefault(module, [])
        if function not in functions:
            functions.append(function)
        if function.endswith(_INSERT) and module.endswith("embedded._write"):
            reached = True
            break
    path = {
        m: [f for f in fs if not f.startswith(_BESIDE_CALLS)]
        for m, fs in modules.items()
        if m not in _BESIDE
    }
    beside = {
        m: [f for f in fs if m in _BESIDE or f.startswith(_BESIDE_CALLS)]
        for m, fs in modules.items()
    }
    return {
        "reached_insert": reached,
        "path": {m: fs for m, fs in path.items() if fs},
        "beside": {m: fs for m, fs in beside.items() if fs},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args(argv)
    report = measure()
    for part in ("path", "beside"):
        found = report[part]
        functions = sum(len(fs) for fs in found.values())
        print(f"{part}: {len(found)} modules, {functions} functions")
        for module, fs in found.items():
            print(f"  {module}: {', '.join(fs)}")
    if not report["reached_insert"]:
        print("the INSERT was not reached", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
