"""The message browser: one page of a partition's records, read with Fetch from its leader.

A page starts at the log start, an offset, the first offset at or after a time
(ListOffsets by timestamp), or ``page_size`` before the end. It holds at most
one Fetch response (``FETCH_MAX_BYTES``) and the page's records; a key filter
reads on, one response at a time, until the page is full, the end is reached or
``SCAN_LIMIT_BYTES`` were read, and says where it stopped so the next page
continues from there.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from enum import StrEnum

from broker.console.collect import EARLIEST, LATEST, list_offsets
from broker.console.kafka import ClusterClient
from broker.tools.client import ClientError
from wire.errors import ErrorCode
from wire.exceptions import CorruptRecordError
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchResponse,
)
from wire.records import iter_batch_headers, iter_records

FETCH_MAX_BYTES = 1024 * 1024
SCAN_LIMIT_BYTES = 16 * 1024 * 1024
MAX_PAGE_SIZE = 500
#: Longest key or value shown; the rest is cut (the size is still shown).
SHOW_BYTES = 16 * 1024
READ_UNCOMMITTED = 0


class Start(StrEnum):
    BEGINNING = "beginning"
    OFFSET = "offset"
    TIME = "time"
    NEWEST = "newest"


class View(StrEnum):
    #: JSON, pretty-printed, when the bytes parse as JSON; text otherwise.
    AUTO = "auto"
    TEXT = "text"
    JSON = "json"
    HEX = "hex"


@dataclass(frozen=True, slots=True)
class Shown:
    """A key, value or header value as the chosen view renders it."""

    text: str
    size: int
    cut: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    offset: int
    timestamp_ms: int
    key: Shown | None
    value: Shown | None
    headers: tuple[tuple[str, Shown | None], ...]


@dataclass(frozen=True, slots=True)
class Page:
    topic: str
    partition: int
    first_offset: int
    messages: tuple[Message, ...]
    next_offset: int
    log_start: int
    log_end: int
    scanned_bytes: int
    error: str | None = None

    @property
    def at_end(self) -> bool:
        return self.next_offset >= self.log_end


def show(data: bytes | None, view: View) -> Shown | None:
    if data is None:
        return None
    part = data[:SHOW_BYTES]
    cut = len(data) > SHOW_BYTES
    if view is View.HEX:
        return Shown(binascii.hexlify(part, " ", 1).decode(), len(data), cut)
    text = part.decode("utf-8", "replace")
    if view in (View.JSON, View.AUTO) and not cut and data[:1] in b"{[\"-0123456789tfn":
        try:
            return Shown(json.dumps(json.loads(data), indent=2, ensure_ascii=False), len(data), False)
        except ValueError:
            pass
    return Shown(text, len(data), cut, note="not JSON" if view is View.JSON else "")


@dataclass(frozen=True, slots=True)
class Query:
    topic: str
    partition: int = 0
    start: Start = Start.NEWEST
    offset: int = 0
    time_ms: int = 0
    key_filter: str = ""
    page_size: int = 50
    view: View = View.AUTO


def _leader(client: ClusterClient, topic: str, partition: int) -> int:
    metadata = client.metadata([topic])
    for t in metadata.topics:
        if t.name == topic and t.error_code == ErrorCode.NONE:
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.leader_id < 0:
                        raise ClientError(f"{topic}-{partition} has no leader")
                    return p.leader_id
        elif t.name == topic:
            raise ClientError(f"topic {topic!r}: {ErrorCode.for_code(t.error_code).name}")
    raise ClientError(f"{topic}-{partition} does not exist")


def read_page(client: ClusterClient, query: Query) -> Page:
    size = max(1, min(query.page_size, MAX_PAGE_SIZE))
    leader = _leader(client, query.topic, query.partition)
    tp = [(query.topic, query.partition)]
    errors: list[str] = []
    log_start = list_offsets(client, leader, tp, EARLIEST, errors).get(tp[0])
    log_end = list_offsets(client, leader, tp, LATEST, errors).get(tp[0])
    if log_start is None or log_end is None:
        raise ClientError("; ".join(errors) or "ListOffsets failed")
    if query.start is Start.BEGINNING:
        first = log_start
    elif query.start is Start.NEWEST:
        first = max(log_start, log_end - size)
    elif query.start is Start.TIME:
        found = list_offsets(client, leader, tp, query.time_ms, errors).get(tp[0], -1)
        first = found if found >= 0 else log_end
    else:
        first = min(max(query.offset, log_start), log_end)
    messages: list[Message] = []
    position, scanned = first, 0
    while len(messages) < size and position < log_end and scanned < SCAN_LIMIT_BYTES:
        data = _fetch(client, leader, query.topic, query.partition, position)
        if not data:
            break
        scanned += len(data)
        progressed = False
        try:
            for pos, header in iter_batch_headers(data):
                if header.next_offset <= position:
                    continue
                if header.is_control:
                    position, progressed = header.next_offset, True
                    continue
                for record in iter_records(data, pos):
                    if record.offset < position:
                        continue
                    position, progressed = record.offset + 1, True
                    if query.key_filter and query.key_filter not in (record.key or b"").decode("utf-8", "replace"):
                        continue
                    messages.append(Message(
                        record.offset, record.timestamp, show(record.key, query.view),
                        show(record.value, query.view),
                        tuple((k, show(v, View.HEX if query.view is View.HEX else View.TEXT))
                              for k, v in record.headers)))
                    if len(messages) >= size:
                        break
                if len(messages) >= size:
                    break
                position, progressed = max(position, header.next_offset), True
        except CorruptRecordError as ex:
            return Page(query.topic, query.partition, first, tuple(messages), position, log_start, log_end,
                        scanned, error=f"corrupt batch: {ex}")
        if not progressed:
            break
    return Page(query.topic, query.partition, first, tuple(messages), position, log_start, log_end, scanned)


def _fetch(client: ClusterClient, leader: int, topic: str, partition: int, offset: int) -> bytes:
    request = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=FETCH_MAX_BYTES, isolation_level=READ_UNCOMMITTED,
        session_id=0, session_epoch=-1,
        topics=[FetchRequestFetchTopic(topic=topic, partitions=[
            FetchRequestFetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=FETCH_MAX_BYTES)])])
    # v12: topics by name (v13+ want topic ids, which the metadata has, but names work everywhere up to 12).
    response = client.broker(leader, request, FetchResponse, _fetch_version(client, leader))
    if response.error_code != ErrorCode.NONE:
        raise ClientError(f"Fetch: {ErrorCode.for_code(response.error_code).name}")
    for t in response.responses:
        for p in t.partitions:
            if p.error_code != ErrorCode.NONE:
                raise ClientError(f"Fetch: {ErrorCode.for_code(p.error_code).name}")
            records = p.records
            if records is None:
                return b""
            if isinstance(records, bytes | bytearray | memoryview):
                return bytes(records)
            return records.read()
    return b""


def _fetch_version(client: ClusterClient, leader: int) -> int:
    return min(12, client.broker_version(leader, FetchRequest.API_KEY))
