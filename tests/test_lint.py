"""The codebase's own rules: mypy --strict on wire/ and ruff, as part of the test run."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.shared import ROOT


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_ruff_is_clean() -> None:
    result = subprocess.run(["ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_wire() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "wire"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_imports_nothing_of_ours() -> None:
    bad = []
    for path in (ROOT / "wire").rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")) and any(
                stripped.split()[1].split(".")[0] == name for name in ("broker", "controller", "trio")
            ):
                bad.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert bad == []


def test_controller_never_imports_broker() -> None:
    bad = []
    for path in (ROOT / "controller").rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import broker", "from broker")):
                bad.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert bad == []
