"""The committed generated code is exactly what scripts/gen_wire.py writes today."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared import ROOT, SCHEMAS

pytestmark = pytest.mark.skipif(
    not (SCHEMAS / "messages").is_dir(), reason="../shared/kafka-protocol is absent"
)


def _differences(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [f"only in committed: {x}" for x in cmp.left_only]
    out += [f"only in regenerated: {x}" for x in cmp.right_only]
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    out += [f"differs: {x}" for x in mismatch + errors]
    for sub in cmp.common_dirs:
        out += [f"{sub}/{d}" for d in _differences(a / sub, b / sub)]
    return out


def test_regenerating_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_wire.py"), "--schemas", str(SCHEMAS), "--out", str(out)],
        check=True,
    )
    assert _differences(ROOT / "wire" / "generated", out) == []
