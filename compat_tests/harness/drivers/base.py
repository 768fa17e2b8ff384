"""The one small interface every client driver offers, and the values it passes around.

A driver runs one operation at a time and keeps no client open between operations, so
tests cannot leak connections or threads from one step into the next.

Errors: a driver turns whatever its client raises into ``ClientError`` with the Kafka
error code when the client exposes one (each client names MESSAGE_TOO_LARGE differently;
``code`` is the common ground). A client that is not installed raises
``DriverUnavailable`` (the test skips); a feature the client does not have raises
``Unsupported`` (the test skips too, naming the feature).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..groups import GroupDescription, GroupMember, GroupOptions

Codec = Literal["none", "gzip", "snappy", "lz4", "zstd"]
ALL_CODECS: tuple[Codec, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
OffsetSpec = Literal["earliest", "latest"] | int

# Kafka error codes the suite names.
MESSAGE_TOO_LARGE = 10
TOPIC_ALREADY_EXISTS = 36
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass(frozen=True, slots=True)
class Record:
    """A record to produce. ``partition=None`` lets the client's partitioner choose."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a produced record landed; ``offset`` is None when the client cannot know
    (acks=0)."""

    partition: int
    offset: int | None


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: frozenset[tuple[int, str, int]]  # (node id, host, port)
    topics: Mapping[str, int]  # topic -> partition count


@dataclass(frozen=True, slots=True)
class Capabilities:
    codecs: frozenset[str]
    admin: bool = True
    #: can set a record's CreateTime
    explicit_timestamps: bool = True
    #: keys may hold any bytes (kcat passes keys through argv: no NUL)
    binary_keys: bool = True
    #: the consumer reads from an exact offset without a consumer group
    assign: bool = True
    #: header values may be any bytes (else: valid UTF-8 without NUL)
    binary_header_values: bool = True
    #: ListOffsets by a timestamp past the last record gives the latest offset, not -1
    timestamp_miss_is_latest: bool = False


class DriverUnavailable(Exception):
    """The client (or its runtime) is not installed; the test skips with this reason."""


class Unsupported(Exception):
    """The client has no such feature; the test skips with this reason."""


class ClientError(Exception):
    """An operation failed in the client. ``code`` is the Kafka error code if known."""

    def __init__(self, client: str, message: str, code: int | None = None, name: str = ""):
        self.client = client
        self.code = code
        self.name = name
        super().__init__(f"[{client}] {name or 'error'} (code={code}): {message}")


class Driver(ABC):
    """One Kafka client, driven through the same small set of operations."""

    name: str = ""
    capabilities: Capabilities

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.bootstrap}>"

    @classmethod
    @abstractmethod
    def check_available(cls) -> None:
        """Raise DriverUnavailable naming what is missing and how to install it."""

    def supports_codec(self, codec: str) -> bool:
        return codec in self.capabilities.codecs

    def require_admin(self) -> None:
        if not self.capabilities.admin:
            raise Unsupported(f"{self.name} has no admin API")

    # -- data ------------------------------------------------------------------------------

    @abstractmethod
    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        acks: int = -1,
        compression: Codec = "none",
    ) -> list[Delivery]:
        """Send ``records`` in order, wait for every acknowledgement, return one Delivery
        per record. Raises ClientError if any record is not acknowledged."""

    @abstractmethod
    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        """Read ``partitions`` from ``start`` (without a group where the client can) until
        ``count`` records arrived or ``timeout_s`` passed; return what arrived, in
        (partition, offset) order per partition."""

    @abstractmethod
    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        """ListOffsets for earliest / latest / a timestamp. -1 means no such offset."""

    @abstractmethod
    def metadata(self) -> ClusterMetadata: ...

    # -- admin -----------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> None:
        raise Unsupported(f"{self.name} has no admin API")

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        raise Unsupported(f"{self.name} has no admin API")

    def alter_topic_config(self, topic: str, key: str, value: str) -> None:
        raise Unsupported(f"{self.name} has no admin API")

    def alter_broker_config(self, broker: str, key: str, value: str | None) -> None:
        """IncrementalAlterConfigs on a broker resource ("" for the cluster default);
        a None value deletes the setting."""
        raise Unsupported(f"{self.name} cannot alter broker configs in this harness")

    def delete_topic(self, name: str) -> None:
        raise Unsupported(f"{self.name} has no admin API")

    # -- consumer groups (harness/groups.py) -------------------------------------------------

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        """A consumer subscribed to ``topic`` in ``group``, in its own process, committing
        after every batch; with ``count`` it closes once that many records arrived."""
        raise Unsupported(f"{self.name} cannot consume through a consumer group")

    def group_consume(
        self, topic: str, group: str, count: int, options: GroupOptions, *, timeout_s: float = 45.0
    ) -> list[tuple[int, int]]:
        """Join ``group``, read ``count`` records, commit, leave; (partition, offset) read."""
        member = self.start_member(topic, group, options, count=count)
        try:
            member.wait_until(lambda m: len(m.consumed()) >= count or not m.alive(), timeout_s,
                              f"{self.name} reading {count} records in group {group}")
            member.wait_exit(timeout_s)
        finally:
            member.kill()
        return member.consumed()

    def list_groups(self) -> dict[str, str | None]:
        """Group id -> state (None where the client's API does not say)."""
        raise Unsupported(f"{self.name} has no admin API")

    def describe_group(self, group: str) -> GroupDescription:
        raise Unsupported(f"{self.name} has no admin API")

    def delete_group(self, group: str) -> None:
        raise Unsupported(f"{self.name} has no admin API")

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset per partition of ``topic`` (partitions without one left out)."""
        raise Unsupported(f"{self.name} has no admin API")


def sort_consumed(records: Sequence[ConsumedRecord]) -> list[ConsumedRecord]:
    return sorted(records, key=lambda r: (r.partition, r.offset))
