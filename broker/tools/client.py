"""A small synchronous Kafka-protocol client, for the command-line tools and tests.

One blocking TCP connection to one broker. On connect it asks ApiVersions which
versions the broker speaks (v3, falling back to v0 as KIP-511 clients do), then
:meth:`KafkaClient.request` sends a message at the highest version both sides
know, or at the version asked for, and returns the decoded response. Every
socket operation has a deadline, so a silent broker makes a tool fail, never
hang. Not thread-safe; not a producer or consumer — just requests.
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from broker.security.client_config import ClientSecurity
from broker.security.mechanism import AuthenticationFailed
from broker.security.oauthbearer_login import OAuthBearerClient
from broker.security.scram import SaslClient
from config import ConfigError
from wire.errors import ErrorCode
from wire.frame import decode_response, encode_request_parts
from wire.generated.api_017_sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_036_sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from wire.generated.registry import API_SPECS
from wire.primitives import Message
from wire.regions import FileRegion

DEFAULT_TIMEOUT_S = 30.0
#: Largest response accepted; Kafka's default fetch.max.bytes (50 MiB) plus headroom.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
CLIENT_SOFTWARE_NAME = "cormorant-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_SIZE = struct.Struct(">i")
_R = TypeVar("_R", bound=Message)


#: Kafka 4.3's newest versions of these APIs name topics by id (Produce 13, OffsetCommit and
#: OffsetFetch 10) or answer a group that is not there with an error (DescribeGroups 6);
#: the tools name topics and show such a group as Dead, so by default they stop before them.
TOOLS_MAX_VERSION: dict[int, int] = {0: 12, 8: 9, 9: 9, 15: 5}

class ClientError(Exception):
    """The broker could not be reached, answered nonsense, or does not speak what we need."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int


_default_security = ClientSecurity()


def set_default_security(security: ClientSecurity) -> None:
    """How every client of this process connects unless told otherwise (``--command-config``)."""
    global _default_security
    _default_security = security


def parse_bootstrap(server: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6addr]:port``) of the first entry of a bootstrap list."""
    first = server.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"bootstrap server {first!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


class KafkaClient:
    """A blocking connection to one broker. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client_id: str = "cormorant-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        self.security = security or _default_security
        self.timeout_s = timeout_s
        self._correlation_id = 0
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as ex:
            raise ClientError(f"cannot connect to {host}:{port}: {ex.strerror or ex}") from ex
        self._sock.settimeout(timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.security.ssl_context is not None:
                try:
                    self._sock = self.security.ssl_context.wrap_socket(self._sock, server_hostname=host)
                except (ssl.SSLError, OSError) as ex:
                    raise ClientError(f"TLS handshake with {host}:{port} failed: {ex}") from ex
            self.api_versions = self._negotiate()
            if self.security.mechanism is not None:
                self._authenticate(self.security)
        except BaseException:
            self.close()
            raise

    @classmethod
    def connect(cls, bootstrap: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                security: ClientSecurity | None = None) -> KafkaClient:
        host, port = parse_bootstrap(bootstrap)
        return cls(host, port, timeout_s=timeout_s, security=security)

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    # ------------------------------------------------------------ versions

    def _negotiate(self) -> dict[int, VersionRange]:
        request = ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
        )
        response = self._exchange(request, 3, ApiVersionsResponse)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The broker answered in v0 with its own range; v0 is always understood.
            response = self._exchange(ApiVersionsRequest(), 0, ApiVersionsResponse)
        if response.error_code != ErrorCode.NONE:
            raise ClientError(f"ApiVersions failed: {ErrorCode(response.error_code).name}")
        return {k.api_key: VersionRange(k.min_version, k.max_version) for k in response.api_keys}

    def _authenticate(self, security: ClientSecurity) -> None:
        mechanism = security.mechanism
        assert mechanism is not None
        handshake = self._exchange(SaslHandshakeRequest(mechanism=mechanism), 1, SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.NONE:
            raise ClientError(f"SASL handshake failed ({ErrorCode(handshake.error_code).name}); "
                              f"the broker offers {', '.join(handshake.mechanisms) or 'nothing'}")
        exchange: SaslClient | OAuthBearerClient = (
            OAuthBearerClient(security.oauthbearer) if security.oauthbearer is not None
            else SaslClient(mechanism, security.username, security.password))
        try:
            token: bytes | None = exchange.first()
            while token is not None:
                token = exchange.next(self._sasl_token(token))
        except AuthenticationFailed as ex:
            raise ClientError(f"SASL authentication failed: {ex}") from ex
        except ConfigError as ex:  # an OAUTHBEARER token that could not be had
            raise ClientError(f"SASL authentication failed: {ex.key}: {ex}") from ex

    def _sasl_token(self, token: bytes) -> bytes:
        version = self.version_for(SaslAuthenticateRequest.API_KEY)
        reply = self._exchange(SaslAuthenticateRequest(auth_bytes=token), version, SaslAuthenticateResponse)
        if reply.error_code != ErrorCode.NONE:
            raise ClientError(reply.error_message or f"SASL authentication failed ({ErrorCode(reply.error_code).name})")
        return reply.auth_bytes

    def version_for(self, api_key: int, wanted: int | None = None) -> int:
        """``wanted`` if the broker speaks it, else the highest version both sides speak."""
        spec = API_SPECS.get(api_key)
        broker = self.api_versions.get(api_key)
        if spec is None or broker is None:
            raise ClientError(f"the broker does not support api key {api_key}")
        if wanted is not None:
            if not broker.min_version <= wanted <= broker.max_version:
                raise ClientError(
                    f"the broker supports {spec.name} v{broker.min_version}-{broker.max_version}, not v{wanted}"
                )
            return wanted
        version = min(spec.max_version, broker.max_version, TOOLS_MAX_VERSION.get(api_key, spec.max_version))
        if version < max(spec.min_version, broker.min_version):
            raise ClientError(f"no common version of {spec.name}")
        return version

    # ------------------------------------------------------------ requests

    def request(self, message: Message, version: int | None = None) -> Message:
        """Send ``message`` and return the decoded response."""
        spec = API_SPECS[message.API_KEY]
        return self._exchange(message, self.version_for(message.API_KEY, version), spec.response)

    def send(self, message: Message, response_type: type[_R], version: int | None = None) -> _R:
        """:meth:`request` with the response's type stated, for type checkers."""
        return self._exchange(message, self.version_for(message.API_KEY, version), response_type)

    def _exchange(self, message: Message, version: int, response_type: type[_R]) -> _R:
        self._correlation_id += 1
        correlation_id = self._correlation_id
        # Large record batches go out as parts of their own rather than copied into the frame.
        frame = encode_request_parts(message, version, correlation_id, self.client_id)
        try:
            for part in frame.parts:
                self._sock.sendall(part.read() if isinstance(part, FileRegion) else part)
            size = _SIZE.unpack(self._read_exactly(4))[0]
            if size < 4 or size > MAX_RESPONSE_BYTES:
                raise ClientError(f"response size {size} outside 4..{MAX_RESPONSE_BYTES}")
            body = self._read_exactly(size)
        except TimeoutError as ex:
            raise ClientError(f"no response within {self.timeout_s}s") from ex
        except OSError as ex:
            raise ClientError(f"connection failed: {ex.strerror or ex}") from ex
        got, response = decode_response(body, response_type, version)
        if got != correlation_id:
            raise ClientError(f"response correlation id {got}, expected {correlation_id}")
        assert isinstance(response, response_type)
        return response

    def _read_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self._sock.recv(min(n - len(chunks), 1 << 20))
            if not chunk:
                raise ClientError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)
