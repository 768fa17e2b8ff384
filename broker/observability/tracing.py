"""OpenTelemetry spans for produce, fetch, group and transaction requests.

Off unless ``tracing.sampling.ratio`` is above 0 and an OTLP endpoint is
configured (``OTEL_EXPORTER_OTLP_ENDPOINT``); then :class:`Tracing` is inert and
each call costs one attribute check. Kafka requests carry no trace context, so
a request span is a trace root sampled at that ratio.

A produce span gets one child span per partition append. When a record in an
appended batch carries a W3C ``traceparent`` header, that child *links* to the
producer's span (a batch mixes records of many traces, so they are links, not
parents). Finding those headers means decoding records: it happens only for
sampled requests and only for uncompressed batches — a compressed batch is
never inflated for tracing; the span counts such batches instead.

Attributes follow OpenTelemetry's messaging conventions (``messaging.system=kafka``,
``messaging.destination.name``, ``messaging.operation.name``/``.type`` ...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.registry import API_SPECS
from wire.records import RecordBatchHeader, iter_records

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

#: Requests that get a span: (operation type or "" when the conventions have none).
TRACED_APIS: dict[int, str] = {
    0: "send",  # Produce
    1: "receive",  # Fetch
    8: "settle",  # OffsetCommit
    9: "",  # OffsetFetch
    10: "",  # FindCoordinator
    11: "",  # JoinGroup
    12: "",  # Heartbeat
    13: "",  # LeaveGroup
    14: "",  # SyncGroup
    22: "",  # InitProducerId
    24: "",  # AddPartitionsToTxn
    25: "",  # AddOffsetsToTxn
    26: "settle",  # EndTxn
    27: "",  # WriteTxnMarkers
    28: "settle",  # TxnOffsetCommit
    42: "",  # DeleteGroups
    47: "",  # OffsetDelete
    68: "",  # ConsumerGroupHeartbeat
}
#: A span holds at most this many links (OpenTelemetry's default span limit).
MAX_LINKS = 128
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@dataclass(slots=True)
class RequestSpan:
    span: Span
    token: Token[Context]


def parse_traceparent(value: bytes | None) -> tuple[int, int, int] | None:
    """(trace id, span id, flags) of a W3C traceparent header value, or None if invalid."""
    if not value or len(value) < 55:
        return None
    try:
        text = value[:55].decode("ascii")
    except UnicodeDecodeError:
        return None
    match = _TRACEPARENT.fullmatch(text)
    if match is None or match.group(1) == "ff":
        return None
    trace_id, span_id = int(match.group(2), 16), int(match.group(3), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, int(match.group(4), 16)


def traceparents(data: bytes | bytearray | memoryview, batches: Sequence[tuple[int, RecordBatchHeader]]) -> tuple[
    list[tuple[int, int, int]], int
]:
    """Distinct traceparents in the uncompressed batches (at most MAX_LINKS), and the
    number of compressed batches that were not looked into."""
    found: dict[tuple[int, int], tuple[int, int, int]] = {}
    compressed = 0
    for pos, header in batches:
        if header.codec_id != 0:
            compressed += 1
            continue
        try:
            for record in iter_records(data, pos, verify_crc=False):
                for key, value in record.headers:
                    if key == "traceparent":
                        parsed = parse_traceparent(value)
                        if parsed is not None and len(found) < MAX_LINKS:
                            found.setdefault(parsed[:2], parsed)
        except DecodeError:
            continue  # validation already accepted the batch; never fail a produce over tracing
    return list(found.values()), compressed


class Tracing:
    """The node's tracer; ``Tracing(None)`` is the inert default."""

    def __init__(self, tracer: Tracer | None) -> None:
        self.tracer = tracer
        self.active = tracer is not None

    def start_request(
        self, api_key: int, api_version: int, client_id: str | None, peer: tuple[str, int], body: Any
    ) -> RequestSpan | None:
        if self.tracer is None or api_key not in TRACED_APIS:
            return None
        from opentelemetry import context, trace

        api = API_SPECS[api_key].name
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": api,
            "cormorant.api_version": api_version,
            "network.peer.address": peer[0],
            "network.peer.port": peer[1],
        }
        if TRACED_APIS[api_key]:
            attributes["messaging.operation.type"] = TRACED_APIS[api_key]
        if client_id:
            attributes["messaging.client.id"] = client_id
        group_id = getattr(body, "group_id", None)
        if isinstance(group_id, str) and group_id:
            attributes["messaging.consumer.group.name"] = group_id
        transactional_id = getattr(body, "transactional_id", None)
        if isinstance(transactional_id, str) and transactional_id:
            attributes["cormorant.transactional_id"] = transactional_id
        topics = _topic_names(api_key, body)
        name = api
        if len(topics) == 1:
            attributes["messaging.destination.name"] = topics[0]
            name = f"{api} {topics[0]}"
        span = self.tracer.start_span(name, kind=trace.SpanKind.SERVER, attributes=attributes)
        token = context.attach(trace.set_span_in_context(span))
        return RequestSpan(span, token)

    def end_request(self, rs: RequestSpan, codes: Sequence[int], error: BaseException | None) -> None:
        from opentelemetry import context, trace

        span = rs.span
        try:
            if error is not None:
                span.record_exception(error)
                span.set_status(trace.StatusCode.ERROR, type(error).__name__)
                span.set_attribute("error.type", type(error).__name__)
            elif codes:
                first = ErrorCode.for_code(codes[0])
                span.set_attribute("error.type", first.name)
                span.set_attribute("cormorant.error_count", len(codes))
                if any(code == ErrorCode.UNKNOWN_SERVER_ERROR or code == ErrorCode.KAFKA_STORAGE_ERROR
                       for code in codes):
                    span.set_status(trace.StatusCode.ERROR, first.name)
        finally:
            context.detach(rs.token)
            span.end()

    def start_append(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray | memoryview,
        batches: Sequence[tuple[int, RecordBatchHeader]],
        records: int,
    ) -> Span | None:
        """A child span of the current (sampled) produce span for one partition append."""
        if self.tracer is None:
            return None
        from opentelemetry import trace

        parent = trace.get_current_span()
        if not parent.is_recording():
            return None
        found, compressed = traceparents(data, batches)
        links = [
            trace.Link(trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)))
            for trace_id, span_id, flags in found
        ]
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": "append",
            "messaging.operation.type": "send",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(partition),
            "messaging.batch.message_count": records,
        }
        if compressed:
            attributes["cormorant.compressed_batches_not_inspected"] = compressed
        return self.tracer.start_span(f"append {topic}", attributes=attributes, links=links)

    def end_append(self, span: Span, first_offset: int) -> None:
        span.set_attribute("messaging.kafka.offset", first_offset)
        span.end()


def _topic_names(api_key: int, body: Any) -> list[str]:
    if api_key == 0:
        return sorted({t.name for t in body.topic_data})
    if api_key == 1:
        return sorted({t.topic for t in body.topics if t.topic})
    return []
