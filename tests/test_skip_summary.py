"""The run's last lines say how many tests skipped and why (tests/skip_summary.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.shared import ROOT

SAMPLE = '''
import pytest

@pytest.mark.skipif(True, reason="the reference folder is absent")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_needs_reference(n):
    pass

def test_needs_jars():
    pytest.skip("CORMORANT_SPARK_JARS is not set")

def test_runs():
    pass
'''


def test_a_run_prints_one_line_counting_skips_by_reason(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.skip_summary",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "skipped:" in ln]
    assert lines == [
        "4 tests skipped: 3 x the reference folder is absent; 1 x CORMORANT_SPARK_JARS is not set "
        "(pytest -rs lists them)"
    ], proc.stdout


def test_the_root_conftest_loads_it() -> None:
    assert "tests.skip_summary" in (ROOT / "conftest.py").read_text()
