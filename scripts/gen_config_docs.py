#!/usr/bin/env python3
"""Write ``docs/configuration.md`` from the settings catalog in ``config/catalog/``.

Usage: ``python scripts/gen_config_docs.py [--check]``

With ``--check`` nothing is written; the exit status is 1 if the committed file
differs from what the catalog renders.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "configuration.md"

sys.path.insert(0, str(ROOT))

from config.docs import render_configuration_markdown  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the file is current")
    args = parser.parse_args()
    text = render_configuration_markdown()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(
                f"{OUT.relative_to(ROOT)} is stale; run scripts/gen_config_docs.py", file=sys.stderr
            )
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
