#!/usr/bin/env python3
"""Write tests/wire/capture_vectors.json: small client request frames taken from the captures.

    python scripts/gen_capture_vectors.py [CAPTURES_DIR]

CAPTURES_DIR is the reference folder's ``kafka-captures/`` (default: the one the tests use,
``../shared/kafka-captures`` or ``$CORMORANT_REFERENCE_DIR/kafka-captures``). The captured
client requests are the reference (the responses came from another broker and are not): for
every client and every (API key, version) it sent, the smallest frame is kept, plus the
smallest Produce frame of every compression scenario, with the header facts the test checks.
So the codec is tested against real clients' bytes in a plain clone, without the folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.shared import CAPTURES, read_capture  # noqa: E402

OUT = ROOT / "tests" / "wire" / "capture_vectors.json"
PRODUCE = 0


def collect(captures: Path) -> list[dict[str, object]]:
    chosen: dict[tuple[str, ...], dict[str, object]] = {}
    for path in sorted(captures.rglob("*.bin")):
        rel = path.relative_to(captures)
        client = rel.parts[0]
        if client.startswith("_") or len(rel.parts) != 2:
            continue  # probes and variants: not a client's own requests
        scenario = path.stem
        for cf in read_capture(path):
            meta = cf.meta
            if cf.direction != "C" or "api_key" not in meta:
                continue
            key, version = int(meta["api_key"]), int(meta["api_version"])
            vector = {
                "client": client,
                "scenario": scenario,
                "api_key": key,
                "api_version": version,
                "correlation_id": int(meta["corr"]),
                "frame": cf.frame.hex(),
            }
            slots: list[tuple[str, ...]] = [(client, str(key), str(version))]
            if key == PRODUCE and scenario.startswith("produce_"):
                slots.append((client, scenario))
            for slot in slots:
                old = chosen.get(slot)
                if old is None or len(str(old["frame"])) > len(str(vector["frame"])):
                    chosen[slot] = vector
    unique = {(str(v["client"]), str(v["frame"])): v for v in chosen.values()}
    return sorted(unique.values(), key=lambda v: (str(v["client"]), int(str(v["api_key"])),
                                                 int(str(v["api_version"])), str(v["scenario"])))


def main() -> int:
    captures = Path(sys.argv[1]) if len(sys.argv) > 1 else CAPTURES
    if not captures.is_dir():
        print(f"no captures at {captures}", file=sys.stderr)
        return 1
    vectors = collect(captures)
    OUT.write_text(json.dumps(vectors, indent=0) + "\n")
    print(f"{len(vectors)} frames -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
