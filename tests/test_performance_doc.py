"""docs/performance.md's generated figures are what its script renders from the committed
JSON (``scripts/performance_doc.py``): a figure edited by hand, or a benchmark re-run
without rendering the page again, fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from paths_support import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "performance_doc", ROOT / "scripts" / "performance_doc.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("performance_doc", module)
    spec.loader.exec_module(module)
    return module


doc = _load()
PAGE = ROOT / "docs" / "performance.md"


def test_the_page_is_what_its_results_render() -> None:
    page = PAGE.read_text("utf-8")
    assert doc.stale_parts(page, doc.Results()) == []
    assert doc.render_page(page, doc.Results()) == page


def test_every_figure_is_on_the_page_and_every_result_is_used() -> None:
    page = PAGE.read_text("utf-8")
    on_page = {m["name"] for m in doc.MARKER.finditer(page)}
    assert on_page == set(doc.FIGURES)
    sources = {source for _, source in doc.FIGURES.values() if source}
    committed = {p.stem for p in doc.RESULTS.glob("*.json")}
    assert sources <= committed
    # Each table says where its figures came from: every quoted result has its metadata.
    for name in sources:
        meta = doc.Results()[name]["meta"]
        assert {"date", "command", "commit", "python", "cpu_count", "load_average"} <= set(meta)
        assert meta["command"].startswith("python benchmarks/")


@pytest.fixture
def copy(tmp_path: Path) -> tuple[Path, Path]:
    page = tmp_path / "performance.md"
    shutil.copyfile(PAGE, page)
    results = tmp_path / "results"
    shutil.copytree(doc.RESULTS, results)
    return page, results


def test_a_figure_edited_by_hand_fails_the_check(copy: tuple[Path, Path]) -> None:
    page, results = copy
    text = page.read_text("utf-8")
    match = next(m for m in doc.MARKER.finditer(text) if m["name"] == "peers-table")
    edited = (
        text[: match.start("body")]
        + match["body"].replace("|", "| 9", 1)
        + text[match.end("body") :]
    )
    page.write_text(edited, "utf-8")
    args = ["--check", "--doc", str(page), "--results", str(results)]
    assert doc.main(args) == 1
    # Rendering puts the measured figures back.
    assert doc.main(["--doc", str(page), "--results", str(results)]) == 0
    assert page.read_text("utf-8") == text
    assert doc.main(args) == 0


def test_a_benchmark_re_run_without_rendering_fails_the_check(copy: tuple[Path, Path]) -> None:
    page, results = copy
    peers = json.loads((results / "peers.json").read_text("utf-8"))
    ours = next(e for e in peers["rows"] if e["peer"] == "ours")
    ours["bytes_per_turn"] = 1234.0
    (results / "peers.json").write_text(json.dumps(peers), "utf-8")
    args = ["--doc", str(page), "--results", str(results)]
    assert doc.main(["--check", *args]) == 1
    assert doc.main(args) == 0
    assert "1,234 B" in page.read_text("utf-8")


def test_a_missing_result_or_figure_is_named(
    copy: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    page, results = copy
    (results / "peers.json").unlink()
    args = ["--doc", str(page), "--results", str(results)]
    assert doc.main(args) == 2
    assert "peers.json is missing" in capsys.readouterr().err
    page.write_text("<!-- fig no-such-figure -->\n<!-- /fig -->\n", "utf-8")
    assert doc.main(args) == 2
    assert "no-such-figure" in capsys.readouterr().err


def test_text_outside_the_markers_is_left_as_written(copy: tuple[Path, Path]) -> None:
    page, results = copy
    page.write_text(
        "Prose, 12 ms by hand.\nWe cost <!-- fig peers-cpu-vs-sdk -->old<!-- /fig --> more.\n",
        "utf-8",
    )
    assert doc.main(["--doc", str(page), "--results", str(results)]) == 0
    rendered = page.read_text("utf-8")
    assert rendered.startswith("Prose, 12 ms by hand.\nWe cost <!-- fig peers-cpu-vs-sdk -->")
    assert "old" not in rendered
    assert rendered.endswith("x<!-- /fig --> more.\n")


def test_a_figure_beginning_a_line_is_refused(
    copy: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Markdown would read the line as an HTML block and end the sentence before it.
    page, results = copy
    page.write_text("A sentence, then\n  <!-- fig peers-cpu-vs-sdk --><!-- /fig --> more.\n")
    assert doc.main(["--doc", str(page), "--results", str(results)]) == 2
    assert "line 2: the figure 'peers-cpu-vs-sdk' begins a line" in capsys.readouterr().err
