"""A raw Kafka-protocol client over a blocking socket, for tests that need exact frames."""

from __future__ import annotations

import socket
import struct

from wire.frame import decode_response, encode_request
from wire.primitives import Message


class RawClient:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0

    def send(self, body: Message, version: int) -> None:
        self.corr += 1
        self.sock.sendall(encode_request(body, version, self.corr, "test"))

    def receive(self, response_type: type[Message], version: int) -> Message:
        size = struct.unpack(">i", self._exactly(4))[0]
        _, body = decode_response(self._exactly(size), response_type, version)
        return body

    def call(self, body: Message, response_type: type[Message], version: int) -> Message:
        self.send(body, version)
        return self.receive(response_type, version)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()
