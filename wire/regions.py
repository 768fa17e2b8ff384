"""Regions: record data the codec frames but does not copy.

Record data can be handed to the encoder as a region of an open file
(:class:`FileRegion`, which the server sends with ``os.sendfile``) or, when an
encoder is asked to, as a large in-memory buffer it references instead of copying.
Either way the encoder writes the bytes around the region and returns the message
as :class:`EncodedParts`: buffers and file regions to send in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, weakref_slot=True)
class FileRegion:
    """``length`` bytes of the open file descriptor ``fd`` starting at ``position``.

    Weak references let the owner of ``fd`` keep it open until the region is dropped.
    """

    fd: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The region's bytes (for tests and for peers that cannot use sendfile)."""
        import os

        return os.pread(self.fd, self.length, self.position)


#: Data the encoder may leave in place: a file region, or a buffer it references.
Region = FileRegion | bytes | bytearray | memoryview

#: One piece of an encoded message.
Part = bytes | bytearray | memoryview | FileRegion


@dataclass(slots=True)
class EncodedParts:
    """An encoded message or frame as parts to send in order.

    Buffers referenced from the message (record data) are parts of their own, so
    the message's buffers must not change until the parts are sent.
    """

    parts: list[Part] = field(default_factory=list)
    size: int = 0  # total bytes, regions included

    def to_bytes(self) -> bytes:
        """Everything in one ``bytes``, reading file regions (for tests and non-socket peers)."""
        out = bytearray()
        for part in self.parts:
            out += part.read() if isinstance(part, FileRegion) else part
        return bytes(out)


def split_parts(w: bytearray, regions: list[tuple[int, Region]]) -> EncodedParts:
    """``w`` with each region (position in ``w``, region) spliced in, as parts."""
    if not regions:
        return EncodedParts([w], len(w))
    parts: list[Part] = []
    mv = memoryview(w)
    start = 0
    size = len(w)
    for pos, region in regions:
        if pos > start:
            parts.append(mv[start:pos])
        parts.append(region)
        size += len(region)
        start = pos
    if start < len(w):
        parts.append(mv[start:])
    return EncodedParts(parts, size)
