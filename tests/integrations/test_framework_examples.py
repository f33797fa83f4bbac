"""The framework examples run offline, each with its framework's own test model.

What a turn stored is read back from the store file, as ``neotoma-agent show`` reads it.
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from neotoma_agent.cli._show import load_transcript
from neotoma_agent.transport.embedded import EmbeddedStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both frameworks run on asyncio only


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "framework", "conversation"),
    [
        ("pydantic_ai_agent", "pydantic_ai", "pydantic-ai-example"),
        ("openai_agents_sdk", "agents", "openai-agents-example"),
    ],
)
async def test_the_example_stores_each_run_as_a_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, framework: str, conversation: str
) -> None:
    extra = {"pydantic_ai": "pydantic-ai", "agents": "openai-agents"}[framework]
    pytest.importorskip(framework, reason=f"the [{extra}] extra is not installed")
    for key in ("PYDANTIC_AI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)  # the offline model, whatever the machine has
    out = io.StringIO()
    results = await load(name).main(tmp_path / "m.db", out=out)
    assert [r.stored_status for r in results] == ["completed", "completed"]
    assert [len(r.tools) for r in results] == [0, 1]
    assert results[1].tools[0].name == "note_task"
    async with EmbeddedStore.open(tmp_path / "m.db") as store:
        shown = await load_transcript(store, conversation)
    assert [t.status for t in shown.turns] == ["completed", "completed"]
    assert "Acme Corp" in out.getvalue()


@pytest.mark.parametrize(
    ("name", "framework", "extra"),
    [
        ("pydantic_ai_agent", "pydantic_ai", "pydantic-ai"),
        ("openai_agents_sdk", "agents", "openai-agents"),
    ],
)
def test_the_example_says_what_to_install_without_its_framework(
    name: str, framework: str, extra: str
) -> None:
    code = (
        f"import sys, runpy; sys.modules[{framework!r}] = None\n"
        f"runpy.run_path({str(EXAMPLES / f'{name}.py')!r}, run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert f"pip install 'neotoma-agent[{extra}]'" in result.stderr
    assert "Traceback" not in result.stderr
