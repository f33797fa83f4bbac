"""Off by default: without opentelemetry installed, or with no provider configured, a turn
makes no span and imports nothing it would not import anyway."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neotoma_agent import NeotomaMemory
from neotoma_agent._engine.phase_records import Prompt
from neotoma_agent._records.keys import TurnKeys
from neotoma_agent._util import otel as _otel
from neotoma_agent.transport.embedded import EmbeddedStore

pytestmark = pytest.mark.anyio


def run_ok(script: str) -> None:
    """Run ``script`` in a fresh interpreter (no ``OTEL_*`` variables): it prints ``ok``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
    assert done.stderr == ""


async def test_no_provider_no_trace(tmp_path: Path) -> None:
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        memory = NeotomaMemory(store, conversation_id="c", platform="tests")
        assert _otel.start_turn(store, Prompt(TurnKeys("c", "t"), "hi")) is None
        async with memory.turn("hi") as t:
            assert _otel.ACTIVE.get() is None
            t.reply = "hello"
    assert t.result.completed


def after_a_turn(db: Path, then: str, *, prelude: str = "") -> str:
    """A script for :func:`run_ok`: ``prelude`` (at the top), a turn on a fresh store at
    ``db``, then ``then`` (in ``main``, the store open: ``store``, ``memory`` and the first
    turn's ``t`` in scope)."""
    first = f"""
        import os
        import sys
        import anyio
        from neotoma_agent import NeotomaMemory
        from neotoma_agent.transport.embedded import EmbeddedStore

        async def main():
            async with EmbeddedStore.open({str(db)!r}) as store:
                memory = NeotomaMemory(store, conversation_id="c", platform="tests")
                async with memory.turn("hi") as t:
                    t.reply = "hello"
                assert t.result.completed
    """
    last = """
        anyio.run(main)
        print("ok")
    """
    return "\n".join(
        (
            textwrap.dedent(prelude),
            textwrap.dedent(first),
            textwrap.indent(textwrap.dedent(then), " " * 8),
            textwrap.dedent(last),
        )
    )


def test_a_turn_without_opentelemetry_installed(tmp_path: Path) -> None:
    # A fresh interpreter where `import opentelemetry` fails, as without the extra.
    prelude = """
        import sys
        sys.modules["opentelemetry"] = None
        from neotoma_agent._util import otel as _otel
    """
    run_ok(
        after_a_turn(tmp_path / "m.db", "assert _otel._api is False, _otel._api", prelude=prelude)
    )


def test_nothing_imported_opentelemetry_so_a_turn_does_not_either(tmp_path: Path) -> None:
    # Installed, but unused by the application: no provider can be set, so no import (a
    # hook process pays for every module). Once the application imports it and sets a
    # provider, the next turn is traced: the absence was not remembered.
    then = """
        assert "opentelemetry" not in sys.modules, "imported with no provider"

        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        async with memory.turn("again") as t:
            t.reply = "traced"
        assert "turn" in [s.name for s in exporter.get_finished_spans()]
    """
    run_ok(after_a_turn(tmp_path / "m.db", then))


def test_a_provider_named_in_the_environment_between_turns_is_loaded(tmp_path: Path) -> None:
    # Nothing imported it, but the environment names a provider (the API's variable, set
    # by the application after a first turn): the next turn loads OpenTelemetry.
    then = """
        assert "opentelemetry" not in sys.modules, "imported with no provider"
        os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
        async with memory.turn("again") as t:
            t.reply = "traced"
        assert t.result.completed
        assert "opentelemetry" in sys.modules, "the named provider was not loaded"
    """
    run_ok(after_a_turn(tmp_path / "m.db", then))


@pytest.mark.parametrize("name", _otel._PROVIDER_ENV)
def test_the_environment_s_provider_names_are_read_as_os_environ_holds_them(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for each in _otel._PROVIDER_ENV:
        monkeypatch.delenv(each, raising=False)
    assert not _otel._provider_named()
    monkeypatch.setenv(name, "sdk_provider")
    assert _otel._provider_named()
    # os.environ replaced by a plain mapping (a test's, an embedding's): asked through it.
    monkeypatch.setattr(os, "environ", {name: "sdk_provider"})
    assert _otel._provider_named()
    monkeypatch.setattr(os, "environ", {})
    assert not _otel._provider_named()
