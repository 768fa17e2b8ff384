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


def _readme_command_blocks() -> list[list[str]]:
    """The README's indented command blocks, each a list of commands (comments dropped)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in [*(ROOT / "README.md").read_text().splitlines(), ""]:
        if line.startswith("    ") and line.strip():
            current.append(line.strip().split("   #")[0].strip())
        elif current:
            blocks.append(current)
            current = []
    return blocks


def test_readme_examples_act_on_topics_they_created_and_wrote() -> None:
    """A reader running a block in order never meets a topic the block did not make."""
    checked = 0
    for block in _readme_command_blocks():
        created: set[str] = set()
        written: set[str] = set()
        for command in block:
            if match := re.search(r"cormorant topics .*\bcreate (\S+)", command):
                created.add(match.group(1))
            if match := re.search(r"kcat .*-P -t (\S+)", command):
                written.add(match.group(1))
            if match := re.search(r"cormorant dump-log .*?(\S+)-\d+/\d{20}\.log", command):
                topic = match.group(1).split("/")[-1]
                assert topic in created and topic in written, f"{command!r}: {topic} not created and written first"
                checked += 1
            if match := re.search(r"cormorant partitions .*\b(?:reassign|elect-leaders) (\w[\w.-]*):", command):
                assert match.group(1) in created, f"{command!r}: {match.group(1)} not created first"
                checked += 1
    assert checked >= 3


def test_quorum_doc_describes_replication_as_built() -> None:
    text = (ROOT / "docs" / "quorum.md").read_text()
    assert "not built" not in text
    assert "AlterPartition" in text and "reliability.md" in text
