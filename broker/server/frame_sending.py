"""Sending a response frame: its buffers, and its file regions with ``os.sendfile``."""

from __future__ import annotations

import errno
import os

import trio

from broker.server.connection_errors import CloseConnection
from wire.frame import EncodedFrame
from wire.regions import FileRegion

#: Largest chunk of a file region read at a time when it cannot be sent with sendfile (TLS).
COPY_CHUNK = 1 << 20


async def send_frame(stream: trio.abc.Stream, frame: EncodedFrame) -> None:
    for part in frame.parts:
        if isinstance(part, FileRegion):
            await _sendfile(stream, part)
        else:
            await stream.send_all(part)


def in_memory_bytes(frame: EncodedFrame) -> int:
    return sum(len(part) for part in frame.parts if not isinstance(part, FileRegion))


async def _sendfile(stream: trio.abc.Stream, region: FileRegion) -> None:
    if not isinstance(stream, trio.SocketStream):
        await _send_region_copied(stream, region)
        return
    sock = stream.socket
    fd = sock.fileno()
    offset = region.position
    left = region.length
    while left > 0:
        try:
            sent = os.sendfile(fd, region.fd, offset, left)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as ex:
            if ex.errno in (errno.EINVAL, errno.ENOSYS):
                # No sendfile for this pair: fall back to reading the region.
                await stream.send_all(os.pread(region.fd, left, offset))
                return
            raise
        if sent == 0:
            raise CloseConnection("file region shorter than expected", offset=offset, left=left)
        offset += sent
        left -= sent


async def _send_region_copied(stream: trio.abc.Stream, region: FileRegion) -> None:
    # TLS encrypts in user space: the region is read in bounded chunks and sent.
    offset = region.position
    left = region.length
    while left > 0:
        chunk = os.pread(region.fd, min(left, COPY_CHUNK), offset)
        if not chunk:
            raise CloseConnection("file region shorter than expected", offset=offset, left=left)
        await stream.send_all(chunk)
        offset += len(chunk)
        left -= len(chunk)
