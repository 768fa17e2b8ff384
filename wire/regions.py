"""File regions: record data the codec frames but never reads.

A Fetch response's record data can be given as a region of an open file; the
encoder returns the bytes around each region so the server can send the region
itself with ``os.sendfile``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of the open file descriptor ``fd`` starting at ``position``."""

    fd: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The region's bytes (for tests and for peers that cannot use sendfile)."""
        import os

        return os.pread(self.fd, self.length, self.position)
