"""Docs that state facts about the code stay in step with it."""

from __future__ import annotations

import re

from broker.handlers import all_handlers
from tests.shared import ROOT


def test_compatibility_api_table_matches_the_handlers() -> None:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (\w+) \| ([\d-]+) \| [\d-]+ \|$", text, re.MULTILINE)
    documented = {int(k): (name, rng) for k, name, rng in rows}
    actual = {}
    for module in all_handlers():
        rng = f"{module.MIN_VERSION}-{module.MAX_VERSION}"
        if module.MIN_VERSION == module.MAX_VERSION:
            rng = str(module.MIN_VERSION)
        actual[module.API_KEY] = rng
    assert {k: v[1] for k, v in documented.items()} == actual
