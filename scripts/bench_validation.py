#!/usr/bin/env python3
"""CPU cost of validating produced batches (broker/log/validation.py), in process.

Times ``validate_produce`` (CRC, header checks, inflating compressed batches, walking
every record) on batches like the load benchmark's: 100 B, 1 KiB and 64 KiB values, no
compression, lz4 and zstd, about 1 MB per batch. Prints microseconds per batch and
nanoseconds per record, with the C accelerator's record walk and, with
CORMORANT_WIRE_PURE=1, the pure-Python one.

Usage: scripts/bench_validation.py [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.config import LogConfig
from broker.log.validation import TimestampPolicy, validate_produce
from wire import record_walk
from wire.batch_builder import build_batch
from wire.compression import Compression
from wire.records import NewRecord

CASES = ((100, 5000), (1024, 1000), (64 * 1024, 15))


def value(size: int, seed: int) -> bytes:
    # Word-like text, as the load benchmark sends, so the codecs find something to compress.
    words = [b"broker", b"record", b"kafka", b"offset", b"%08d" % seed, b"partition", b"log"]
    out = bytearray()
    i = seed
    while len(out) < size:
        out += words[i % len(words)] + b" "
        i = i * 7 + 3
    return bytes(out[:size])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per case")
    args = parser.parse_args()
    now = int(time.time() * 1000)
    config = LogConfig(max_message_bytes=16 << 20)
    policy = TimestampPolicy()
    walk = "C accelerator" if record_walk.accelerated() else "pure Python"
    print(f"record walk: {walk}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("| codec | value size | records/batch | µs/batch | ns/record |")
    print("|---|---:|---:|---:|---:|")
    for codec in (Compression.NONE, Compression.LZ4, Compression.ZSTD):
        for size, count in CASES:
            records = [NewRecord(key=None, value=value(size, i), timestamp=now) for i in range(count)]
            batch = build_batch(records, compression=codec)
            validate_produce(batch, 9, config, now, policy)
            reps = 0
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                validate_produce(batch, 9, config, now, policy)
                reps += 1
            per_batch = (time.perf_counter() - start) / reps
            print(f"| {codec.name.lower()} | {size:,} B | {count:,} | {per_batch * 1e6:,.0f} | "
                  f"{per_batch / count * 1e9:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
