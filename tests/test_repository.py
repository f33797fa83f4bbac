"""What the repository tracks, what the package's metadata says, and how the README says to
install a package that is not on PyPI yet."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import clean_env
from paths_support import ROOT

README = ROOT / "README.md"


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing is tracked to check")
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_no_coverage_data_or_build_output_is_tracked() -> None:
    tracked = _tracked()
    generated = re.compile(r"(^|/)(\.coverage(\..*)?|coverage\.xml|htmlcov/.*|site/.*|dist/.*)$")
    assert [path for path in tracked if generated.search(path)] == []
    ignored = (ROOT / ".gitignore").read_text("utf-8").split()
    assert ".coverage" in ignored


def _install_section() -> str:
    text = README.read_text("utf-8")
    return text[text.index("## Install") : text.index("<!-- --8<-- [end:install] -->")]


def _urls() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python >= 3.11's")
    with (ROOT / "pyproject.toml").open("rb") as f:
        urls: dict[str, str] = tomllib.load(f)["project"]["urls"]
    return urls


def test_the_metadata_names_the_documentation_the_site_is_built_for() -> None:
    documentation = _urls()["Documentation"]
    site_url = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text("utf-8"), re.M)
    assert site_url is not None
    assert documentation == site_url.group(1)
    assert documentation.startswith("https://")


def test_the_readme_installs_from_a_checkout_or_a_wheel_until_the_package_is_published() -> None:
    # `pip install neotoma-agent` fails while nothing is published: every install command
    # names a folder or a wheel file, and the wheel is built from the checkout.
    commands = re.findall(r"^pip \S+ .*$", _install_section(), re.M)
    installs = [c for c in commands if c.startswith("pip install")]
    assert installs
    for command in installs:
        target = command.split("#")[0].split()[2]
        assert target.startswith(("./", "dist/")), command
    assert any(c.startswith("pip wheel --no-deps -w dist ./neotoma-agent") for c in commands)


@pytest.mark.slow
def test_the_readme_wheel_builds_and_installs_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    # The two commands as written, from a folder holding a clean copy of the checkout.
    _tracked()
    checkout = tmp_path / "neotoma-agent"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = clean_env(tmp_path / "home", {"PATH": f"{venv / 'bin'}:/usr/bin:/bin"})
    commands = re.findall(r"^(pip (?:wheel|install) \S+.*?)(?:\s+#.*)?$", _install_section(), re.M)
    for command in commands[1:]:  # the first installs from the folder itself
        subprocess.run(command, shell=True, cwd=tmp_path, env=env, check=True, timeout=600)
    version = subprocess.run(
        [str(venv / "bin" / "neotoma-agent"), "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.startswith("neotoma-agent ")
