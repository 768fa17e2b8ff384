#!/usr/bin/env python3
"""Generate ``wire/generated/`` from Apache Kafka's JSON message schemas.

Usage: ``python scripts/gen_wire.py [--schemas DIR] [--newer-schemas DIR] [--out DIR]``

The schemas are read from ``../shared/kafka-protocol`` (beside the project root) by
default; they are never copied into the project, and neither is their prose. The APIs
Kafka 4.3's schemas (``../shared/kafka-protocol-4.3``) are merged in: every API both
define is generated from 4.3's schema, extended down to 3.9's lowest version, with
the fields that only those older versions had (see :func:`merge_schemas`), so 4.3's
new versions are spoken while 3.9's clients keep theirs. For
every struct and every version the generator emits a straight-line decode and
encode function, then keeps one copy of each distinct function body, so versions
with the same layout share code. Consecutive fixed-width fields are read and
written with a single precompiled ``struct.Struct``. Each module also gets an
``_accel_programs()`` function returning every struct's layout per version as data,
which the optional C accelerator (``wire/_speedups.c``) interprets.
"""


from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run as a script (or loaded from its path): the generator package sits beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wiregen.generate import generate
from wiregen.merge import newer_api_schemas
from wiregen.schema import parse_schema

# What the wire tests' schema strategies read from this module.
__all__ = ["NEWER_SCHEMAS_NAME", "generate", "main", "newer_api_schemas", "parse_schema"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMAS = ROOT.parent / "shared" / "kafka-protocol"
NEWER_SCHEMAS_NAME = "kafka-protocol-4.3"  # beside the 3.9 schemas
DEFAULT_OUT = ROOT / "wire" / "generated"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--newer-schemas", type=Path, default=None,
                    help=f"Kafka 4.3 schemas, merged over 3.9's (default: {NEWER_SCHEMAS_NAME} "
                         "beside --schemas)")
    args = ap.parse_args(argv)
    if args.newer_schemas is None:
        args.newer_schemas = args.schemas.parent / NEWER_SCHEMAS_NAME
    if not (args.schemas / "messages").is_dir():
        print(f"no schemas at {args.schemas}", file=sys.stderr)
        return 2
    if not (args.newer_schemas / "messages").is_dir():
        print(f"no schemas at {args.newer_schemas}", file=sys.stderr)
        return 2
    generate(args.schemas, args.out, args.newer_schemas)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
