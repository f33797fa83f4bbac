"""The OpenTelemetry guide's example (docs/otel.md) runs as written and prints the turn's spans."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "otel.md"


def test_the_console_example_prints_the_turns_spans(tmp_path: Path) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)\n```", text, re.DOTALL)
    assert match is not None
    script = tmp_path / "otel_section.py"
    script.write_text(match.group(1), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={
            k: v
            for k, v in os.environ.items()
            if k != "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
        },
    )
    assert done.returncode == 0, done.stderr
    # The console exporter writes one JSON object per span.
    spans = [json.loads(chunk) for chunk in re.split(r"(?<=\n})\n(?=\{)", done.stdout.strip())]
    names = [s["name"] for s in spans]
    assert names[-1] == "turn"
    assert sorted(names[:-1]) == [
        "search_memory",
        "search_memory",
        "upsert_memory",
        "upsert_memory",
    ]
    turn = spans[-1]
    assert turn["attributes"]["gen_ai.conversation.id"] == "chat-1"
    assert turn["attributes"]["neotoma_agent.turn.outcome"] == "completed"
    assert {s["context"]["trace_id"] for s in spans} == {turn["context"]["trace_id"]}
    assert "Acme Corp is a customer" not in done.stdout  # no content by default
