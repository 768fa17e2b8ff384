#!/usr/bin/env python3
"""Coverage-guided fuzzing of the request decoder, record batches and the frame
splitter with atheris.

Usage: python scripts/fuzz_wire.py -runs=1000000 [-max_len=4096] [corpus_dir]

Any exception other than DecodeError (and its subclasses) is a crash; a hang is
caught by libFuzzer's -timeout. When the C accelerator is built, one mode decodes
each input on both paths and fails on any difference in result or error; the record
mode also runs the produce path's record walk on both paths. The captured client requests under
../shared/kafka-captures seed the corpus when the directory is empty.

Needs atheris (`pip install atheris`), which is not in the `test` extra: the suite's own
fuzz and property tests use hypothesis.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports():
    from wire import accel, record_walk
    from wire.exceptions import DecodeError
    from wire.frame import FrameSplitter, decode_request
    from wire.records import iter_records, validate_batches


def outcome(body: bytes) -> object:
    try:
        req = decode_request(body)
    except DecodeError as ex:
        return (type(ex).__name__, str(ex), ex.offset, ex.api_key, ex.api_version)
    return (req.header, req.body)


def differential(body: bytes) -> None:
    """The accelerator and the pure-Python decoder agree on ``body``."""
    if not accel.available():
        decode_request(body)
        return
    fast = outcome(body)
    accel.disable()
    try:
        reference = outcome(body)
    finally:
        accel.enable()
    if fast != reference:
        raise AssertionError(f"accelerator {fast!r} != pure {reference!r}")


def walk_differential(body: bytes) -> None:
    """The produce path's record walk: the accelerator's and the reference agree."""
    if len(body) < 2:
        return
    count, data = body[0] % 64, body[1:]
    reference = record_walk.walk_records_py(data, count, 0, -(2**40), 2**40, True, True)
    fast = record_walk._accelerated
    if fast is not None and fast(data, count, 0, -(2**40), 2**40, True, True) != reference:
        raise AssertionError(f"record walk: accelerator != pure {reference!r}")


def seed_corpus(corpus: Path) -> None:
    captures = ROOT.parent / "shared" / "kafka-captures"
    if not captures.is_dir() or any(corpus.iterdir()):
        return
    import struct

    n = 0
    for path in sorted(captures.rglob("*.bin")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            direction = data[pos]
            (size,) = struct.unpack_from(">I", data, pos + 1)
            frame = data[pos + 5 : pos + 5 + size]
            pos += 5 + size
            if direction == ord("C") and len(frame) <= 8192:
                for mode in (b"\x00", b"\x03"):  # plain and differential decoding
                    (corpus / f"seed-{n:05d}").write_bytes(mode + frame[4:])
                    n += 1


def test_one(data: bytes) -> None:
    if not data:
        return
    mode, body = data[0] % 4, data[1:]
    try:
        if mode == 0:
            decode_request(body)
        elif mode == 1:
            walk_differential(body)
            for _ in validate_batches(body):
                pass
            for _ in iter_records(body, 0, max_decompressed_bytes=1 << 20):
                pass
        elif mode == 3:
            differential(body)
        else:
            splitter = FrameSplitter(max_frame_bytes=1 << 16)
            splitter.feed(body)
            for frame in splitter.frames():
                decode_request(frame)
    except DecodeError:
        pass


def main() -> None:
    args = list(sys.argv)
    dirs = [a for a in args[1:] if not a.startswith("-")]
    if dirs:
        corpus = Path(dirs[0])
        corpus.mkdir(parents=True, exist_ok=True)
        seed_corpus(corpus)
    atheris.Setup(args, test_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
