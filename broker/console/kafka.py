"""The console's connections to a cluster: one :class:`KafkaClient` per broker, opened as needed.

The poller thread and the web handlers share them, so each connection has a
lock; a connection that fails is dropped and reopened on next use. Every
request has a deadline (``request.timeout.ms`` of the client properties), so a
dead broker makes a page show less, never hang. Every connection uses the
client properties' security settings (TLS, SASL), read as the other tools read them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from broker.security.client_config import ClientSecurity, client_security
from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from wire.errors import ErrorCode
from wire.generated.api_003_metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from wire.generated.api_010_find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from wire.primitives import Message

_R = TypeVar("_R", bound=Message)

DEFAULT_REQUEST_TIMEOUT_MS = 5_000
#: Client properties the console understands, besides ``ssl.*`` and ``sasl.*``; anything else is
#: refused rather than ignored.
SUPPORTED_PROPERTIES = {"security.protocol", "client.id", "request.timeout.ms"}
SUPPORTED_PREFIXES = ("ssl.", "sasl.")


class ConsoleConfigError(Exception):
    """A client property the console cannot honour."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    client_id: str = "cormorant-console"
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    security: ClientSecurity = field(default_factory=ClientSecurity)


def load_client_properties(path: Path | None) -> ClientSettings:
    """Read ``--command-config``: Java properties, as the Kafka tools take them."""
    if path is None:
        return ClientSettings()
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        values[key.strip()] = value.strip()
    unknown = sorted(k for k in set(values) - SUPPORTED_PROPERTIES if not k.startswith(SUPPORTED_PREFIXES))
    if unknown:
        raise ConsoleConfigError(f"unsupported client properties: {', '.join(unknown)}")
    try:
        security = client_security(values)
    except ValueError as ex:  # config.ConfigError, which names the setting
        raise ConsoleConfigError(f"{getattr(ex, 'key', 'client properties')}: {ex}") from None
    try:
        timeout_ms = int(values.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS))
    except ValueError:
        raise ConsoleConfigError("request.timeout.ms must be an integer") from None
    if timeout_ms <= 0:
        raise ConsoleConfigError("request.timeout.ms must be positive")
    return ClientSettings(client_id=values.get("client.id", "cormorant-console"),
                          request_timeout_s=timeout_ms / 1000, security=security)


class _Connection:
    def __init__(self, host: str, port: int, settings: ClientSettings) -> None:
        self.host, self.port, self.settings = host, port, settings
        self.lock = threading.Lock()
        self.client: KafkaClient | None = None

    def _open(self) -> KafkaClient:
        return KafkaClient(self.host, self.port, timeout_s=self.settings.request_timeout_s,
                           client_id=self.settings.client_id, security=self.settings.security)

    def send(self, message: Message, response_type: type[_R], version: int | None) -> _R:
        with self.lock:
            if self.client is None:
                self.client = self._open()
            try:
                return self.client.send(message, response_type, version)
            except ClientError:
                self.client.close()
                self.client = None
                raise

    def version_for(self, api_key: int) -> int:
        with self.lock:
            if self.client is None:
                self.client = self._open()
            return self.client.version_for(api_key)

    def close(self) -> None:
        with self.lock:
            if self.client is not None:
                self.client.close()
                self.client = None


class ClusterClient:
    """Requests to the bootstrap servers, to a broker by id, or to a group's coordinator."""

    def __init__(self, bootstrap: str, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings()
        self.bootstrap_servers = [parse_bootstrap(s) for s in bootstrap.split(",") if s.strip()]
        if not self.bootstrap_servers:
            raise ConsoleConfigError("--bootstrap-server is empty")
        self._lock = threading.Lock()
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
        for connection in connections:
            connection.close()

    def _connection(self, host: str, port: int) -> _Connection:
        with self._lock:
            key = (host, port)
            if key not in self._connections:
                self._connections[key] = _Connection(host, port, self.settings)
            return self._connections[key]

    def _candidates(self) -> list[tuple[str, int]]:
        with self._lock:
            known = sorted(self._brokers.values())
        return list(dict.fromkeys([*self.bootstrap_servers, *known]))

    def any_broker(self, message: Message, response_type: type[_R], version: int | None = None) -> _R:
        """Send to the first bootstrap (or known) broker that answers."""
        last: ClientError | None = None
        for host, port in self._candidates():
            try:
                return self._connection(host, port).send(message, response_type, version)
            except ClientError as ex:
                last = ex
        raise last or ClientError("no broker reachable")

    def broker(self, node_id: int, message: Message, response_type: type[_R], version: int | None = None) -> _R:
        with self._lock:
            address = self._brokers.get(node_id)
        if address is None:
            raise ClientError(f"broker {node_id} is not in the metadata")
        return self._connection(*address).send(message, response_type, version)

    def broker_version(self, node_id: int, api_key: int) -> int:
        """The highest version of ``api_key`` that broker ``node_id`` and this client share."""
        with self._lock:
            address = self._brokers.get(node_id)
        if address is None:
            raise ClientError(f"broker {node_id} is not in the metadata")
        return self._connection(*address).version_for(api_key)

    def address(self, host: str, port: int, message: Message, response_type: type[_R],
                version: int | None = None) -> _R:
        return self._connection(host, port).send(message, response_type, version)

    def address_version(self, host: str, port: int, api_key: int) -> int:
        return self._connection(host, port).version_for(api_key)

    def metadata(self, topics: Iterable[str] | None = None) -> MetadataResponse:
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        response = self.any_broker(request, MetadataResponse)
        with self._lock:
            self._brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        return response

    def coordinator(self, group: str) -> tuple[str, int]:
        """The group coordinator's address; raises :class:`ClientError` while there is none."""
        found = self.coordinators([group])[group]
        if isinstance(found, str):
            raise ClientError(f"no coordinator for group {group!r}: {found}")
        return found

    def coordinators(self, groups: list[str]) -> dict[str, tuple[str, int] | str]:
        """Each group's coordinator address, or the error name; one request from FindCoordinator v4 on."""
        host, port = self._candidates()[0]
        try:
            batched = self._connection(host, port).version_for(FindCoordinatorRequest.API_KEY) >= 4
        except ClientError:
            batched = True
        out: dict[str, tuple[str, int] | str] = {}
        if batched:
            response = self.any_broker(FindCoordinatorRequest(key_type=0, coordinator_keys=groups),
                                       FindCoordinatorResponse)
            for c in response.coordinators:
                out[c.key] = (c.host, c.port) if c.error_code == ErrorCode.NONE else ErrorCode.for_code(
                    c.error_code).name
        else:
            for group in groups:
                r = self.any_broker(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse)
                out[group] = (r.host, r.port) if r.error_code == ErrorCode.NONE else ErrorCode.for_code(
                    r.error_code).name
        for group in groups:
            out.setdefault(group, "COORDINATOR_NOT_AVAILABLE")
        return out
