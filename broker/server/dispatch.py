"""From request frames to handlers and back: the only place API keys are routed.

Each handler module in ``broker/handlers`` declares the API key and the version
range Cormorant supports, and an ``async def handle(ctx, request)``. This module
decides what is advertised in ApiVersions, rejects what is not supported the way
Kafka does (close the connection; ApiVersions gets error 35 in a v0 body), answers
requests it cannot decode with INVALID_REQUEST where the response has a top-level
error code (else closes the connection), and
turns unexpected exceptions into UNKNOWN_SERVER_ERROR without taking anything
else down.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

from broker.eventloop.pacing import (
    OFF_LOOP_ENTRIES,
    OFF_LOOP_FRAME_BYTES,
    PRODUCE_ON_LOOP_ENTRIES,
    Pacer,
    off_loop,
    release,
)
from broker.quotas.managers import RequestThrottle, client_throttles
from broker.security.kafka_principal import ANONYMOUS, KafkaPrincipal
from broker.server.network import CloseConnection, ConnectionInfo, RequestFrame, delay_response
from broker.server.response_errors import BrokerErrorLog, error_code_counts, error_codes
from broker.transaction.markers import WRITE_TXN_MARKERS_VERSION
from wire.errors import ErrorCode
from wire.exceptions import DecodeError, UnsupportedVersionError
from wire.frame import (
    EncodedFrame,
    Request,
    RequestPreamble,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_request,
)
from wire.generated.api_018_api_versions import ApiVersionsResponse, ApiVersionsResponseApiVersion
from wire.generated.api_027_write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from wire.generated.header_request_header import RequestHeader
from wire.primitives import REFERENCE_FROM, DecodeLimits, Message

if TYPE_CHECKING:
    from broker.server.services import BrokerServices

log = structlog.get_logger(__name__)

PRODUCE = 0
FETCH = 1
API_VERSIONS = 18
SASL_HANDSHAKE = 17
Handler = Callable[["RequestContext", Any], Awaitable[Message | None]]


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    #: Builds a response giving every topic/partition of the request an error code.
    error_response: Callable[[Any, ErrorCode], Message] | None = None


@dataclass(slots=True)
class RequestContext:
    """One request as its handler sees it: who sent it on which connection, its header,
    and the broker's services (what a handler may use, see broker/server/services.py)."""

    services: BrokerServices
    conn: ConnectionInfo
    header: RequestHeader
    #: The authenticated principal; every PLAINTEXT client is User:ANONYMOUS, as in Kafka.
    principal: KafkaPrincipal = field(default=ANONYMOUS)

    @property
    def client_host(self) -> str:
        """The client's address, which host-restricted ACLs compare with."""
        return self.conn.peer_host
    #: Handlers looping over the request's entries tick it (see broker/eventloop/pacing.py).
    pacer: Pacer = field(default_factory=Pacer)
    #: Quota throttling of this request: handlers add theirs, the dispatcher applies it.
    throttle: RequestThrottle = field(default_factory=lambda: RequestThrottle("", ""))
    #: The request's size on the wire without its length prefix (Kafka's ``request.sizeInBytes``).
    request_size: int = 0

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id


def load_handlers(modules: list[ModuleType]) -> dict[int, ApiEntry]:
    table: dict[int, ApiEntry] = {}
    for module in modules:
        entry = ApiEntry(
            module.API_KEY,
            module.__name__.rsplit(".", 1)[-1],
            module.MIN_VERSION,
            module.MAX_VERSION,
            module.handle,
            getattr(module, "error_response", None),
        )
        assert entry.api_key not in table, f"two handlers for api key {entry.api_key}"
        table[entry.api_key] = entry
    return table


class Dispatcher:
    def __init__(self, apis: dict[int, ApiEntry], limits: DecodeLimits) -> None:
        self.apis = apis
        self.limits = limits
        #: Tighter limits for decoding a large Produce frame on the loop (see PRODUCE_ON_LOOP_ENTRIES).
        self.produce_on_loop_limits = replace(
            limits,
            max_array_length=min(limits.max_array_length, PRODUCE_ON_LOOP_ENTRIES),
            max_tagged_fields=min(limits.max_tagged_fields, PRODUCE_ON_LOOP_ENTRIES),
        )
        self.error_log = BrokerErrorLog()
        self._services: BrokerServices | None = None
        self._api_versions: tuple[ApiVersionsResponseApiVersion, ...] | None = None

    def bind(self, services: BrokerServices) -> None:
        """The services handlers get; set by the node once they exist, before any listener serves."""
        self._services = services

    @property
    def services(self) -> BrokerServices:
        if self._services is None:
            raise RuntimeError("a request reached a dispatcher before the broker's services were bound")
        return self._services

    def api_versions(self) -> list[ApiVersionsResponseApiVersion]:
        """The ApiVersions entries (the table never changes: built once, as every connection
        starts with an ApiVersions and building them cost a third of answering it)."""
        if self._api_versions is None:
            self._api_versions = tuple(
                ApiVersionsResponseApiVersion(api_key=e.api_key, min_version=e.min_version, max_version=e.max_version)
                for e in sorted(self.apis.values(), key=lambda e: e.api_key)
            )
        return list(self._api_versions)

    async def handle(self, conn: ConnectionInfo, frame: RequestFrame) -> EncodedFrame | None:
        metrics = self.services.metrics
        metrics.request_received(len(frame) + 4)
        sasl = conn.sasl
        if sasl is not None and not sasl.complete and sasl.raw_tokens:
            return await sasl.handle_raw(frame)
        try:
            pre = peek_request(frame)
        except DecodeError as ex:
            metrics.decode_failure("short_header")
            raise CloseConnection("request shorter than its header", size=len(frame)) from ex
        if sasl is not None and sasl.complete:
            if pre.api_key == SASL_HANDSHAKE and sasl.reauthenticate(pre):
                return await sasl.handle(pre, frame, self.limits)
            if sasl.expired():
                # KIP-368: a session past connections.max.reauth.ms is not served any more.
                raise CloseConnection("SASL session expired", api_key=pre.api_key)
        elif sasl is not None and not (pre.api_key == API_VERSIONS and sasl.take_api_versions()):
            # Before authentication only the SASL exchange (and one ApiVersions) is served.
            return await sasl.handle(pre, frame, self.limits)
        entry = self.apis.get(pre.api_key)
        if entry is None:
            metrics.decode_failure("unknown_api")
            raise CloseConnection("unknown or unsupported api key", api_key=pre.api_key, api_version=pre.api_version)
        if not entry.min_version <= pre.api_version <= entry.max_version:
            if pre.api_key == API_VERSIONS:
                # The client learns our range from a v0 body and retries (KIP-511).
                body = ApiVersionsResponse(
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                    api_keys=[ApiVersionsResponseApiVersion(
                        api_key=API_VERSIONS, min_version=entry.min_version, max_version=entry.max_version)],
                )
                return encode_response(body, 0, pre.correlation_id)
            metrics.decode_failure("unsupported_version")
            raise CloseConnection("unsupported api version", api=entry.name, api_version=pre.api_version)
        pacer = Pacer()
        try:
            return await self._handle(conn, frame, pre, entry, pacer)
        finally:
            pacer.close()

    async def _decode(self, frame: RequestFrame, pre: RequestPreamble, pacer: Pacer) -> Request:
        if len(frame) < OFF_LOOP_FRAME_BYTES:
            return decode_request(frame, self.limits)
        if pre.api_key == PRODUCE:
            # Large for its records, which decoding does not copy: decoded here unless it names
            # more partitions than the tighter limits allow (then, or if it is malformed, it is
            # decoded off the loop with the real limits, which also finds the real error).
            try:
                return decode_request(frame, self.produce_on_loop_limits)
            except DecodeError:
                pass
        pacer.mark_large()
        lane = "produce" if pre.api_key == PRODUCE else "codec"
        return await off_loop(decode_request, frame, self.limits, True, lane=lane)

    async def _handle(
        self, conn: ConnectionInfo, frame: RequestFrame, pre: RequestPreamble, entry: ApiEntry, pacer: Pacer
    ) -> EncodedFrame | None:
        services = self.services
        metrics = services.metrics
        try:
            request = await self._decode(frame, pre, pacer)
        except DecodeError as ex:
            metrics.decode_failure("malformed")
            refusal = invalid_request_response(entry.api_key, pre.api_version, pre.correlation_id)
            if refusal is None:
                raise CloseConnection("malformed request", api=entry.name, api_version=pre.api_version,
                                      error=ex.reason, offset=ex.offset) from ex
            log.info("request_refused", reason="malformed request", api=entry.name,
                     api_version=pre.api_version, error=ex.reason, offset=ex.offset,
                     peer=f"{conn.peer_host}:{conn.peer_port}")
            metrics.record_errors(entry.api_key, {ErrorCode.INVALID_REQUEST: 1})
            return refusal
        ctx = RequestContext(services, conn, request.header, conn.principal, pacer, request_size=len(frame))
        quotas = services.quotas
        ctx.throttle = quotas.start_request(pre.api_key, conn.principal.name, request.header.client_id or "",
                                            _follower_fetch(pre.api_key, request.body), conn.io_tasks)
        tracing = services.tracing
        span = tracing.start_request(pre.api_key, pre.api_version, request.header.client_id,
                                     (conn.peer_host, conn.peer_port), request.body) if tracing.active else None
        response: Message | None = None
        failure: Exception | None = None
        started = time.perf_counter()
        metrics.request_started()
        try:
            response = await entry.handle(ctx, request.body)
        except CloseConnection:
            raise
        except Exception as ex:
            failure = ex
            log.exception("request_failed", api=entry.name, api_version=pre.api_version,
                          client_id=request.header.client_id)
            if entry.error_response is not None:
                response = entry.error_response(request.body, ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                response = error_response(entry, request.body, pre.api_version)
            if response is None:
                raise CloseConnection("handler failed", api=entry.name) from None
        finally:
            metrics.record_request(entry.api_key, time.perf_counter() - started)
            if response is None and span is not None:
                tracing.end_request(span, [], failure)
            _, throttle_ms = quotas.finish_request(ctx.throttle)
            # KIP-219: the response says how long to wait and the connection is muted as long;
            # older clients do not wait by themselves, so their response is held as long.
            conn.mute(throttle_ms)
            if throttle_ms > 0 and not client_throttles(pre.api_key, pre.api_version):
                delay_response(throttle_ms)
        if response is None:
            return None
        if throttle_ms > 0 and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle_ms
        large = ctx.pacer.entries >= OFF_LOOP_ENTRIES
        codes: Counter[int] | None
        if large:  # counting the error codes of a million entries grows with the request too
            codes = await off_loop(error_code_counts, response)
        else:  # most responses carry no error: no Counter made for them (it cost 4 % of a request)
            found = error_codes(response)
            codes = Counter(found) if found else None
        if codes:
            metrics.record_errors(entry.api_key, codes)
            self.error_log.report(
                _api_name(entry.api_key), entry.api_key, pre.api_version, request.header.client_id,
                f"{conn.peer_host}:{conn.peer_port}", request.body, response, codes,
                skip=ErrorCode.UNKNOWN_SERVER_ERROR if failure is not None else None,
            )
        if span is not None:
            tracing.end_request(span, list(codes.elements()) if codes else [], failure)
        try:
            if large:
                encoded = await off_loop(encode_response, response, pre.api_version, pre.correlation_id,
                                         None, REFERENCE_FROM, True)
            else:
                encoded = encode_response(response, pre.api_version, pre.correlation_id)
        except (UnsupportedVersionError, ValueError) as ex:
            log.error("response_encoding_failed", api=entry.name, api_version=pre.api_version, error=str(ex))
            raise CloseConnection("response encoding failed", api=entry.name) from ex
        metrics.response_sent(encoded.size)
        if large or pacer.large:
            await release(pacer, request.body, response)
        return encoded


class LoopbackMarkerSender:
    """Sends WriteTxnMarkers to this broker through its own dispatcher, as a peer would
    (the transaction coordinator's sender for partitions this broker leads)."""

    def __init__(self, dispatcher: Dispatcher, node_id: int) -> None:
        self._dispatcher = dispatcher
        self._node_id = node_id
        self._correlation = itertools.count(1)
        self._conn = ConnectionInfo("inter-broker", "PLAINTEXT", "127.0.0.1", 0, 0, -1)

    async def send(self, broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse | None:
        if broker_id != self._node_id:
            return None
        correlation_id = next(self._correlation)
        frame = encode_request(request, WRITE_TXN_MARKERS_VERSION, correlation_id,
                               f"broker-{self._node_id}-txn-marker-sender")
        try:
            encoded = await self._dispatcher.handle(self._conn, bytearray(frame[4:]))
        except CloseConnection as ex:
            log.warning("txn_marker_request_rejected", reason=str(ex))
            return None
        if encoded is None:
            return None
        got, response = decode_response(encoded.to_bytes()[4:], WriteTxnMarkersResponse, WRITE_TXN_MARKERS_VERSION)
        if got != correlation_id or not isinstance(response, WriteTxnMarkersResponse):
            return None
        return response


def _follower_fetch(api_key: int, body: Message) -> bool:
    """A Fetch from a follower replica (exempt from client quotas, as in Kafka)."""
    if api_key != FETCH:
        return False
    replica_id: int = getattr(body, "replica_id", -1)
    state = getattr(body, "replica_state", None)
    return replica_id >= 0 or (state is not None and state.replica_id >= 0)


def _api_name(api_key: int) -> str:
    from wire.generated.registry import API_SPECS

    return API_SPECS[api_key].name


def invalid_request_response(api_key: int, api_version: int, correlation_id: int) -> EncodedFrame | None:
    """INVALID_REQUEST for a request that could not be decoded (over a decoder limit, or
    malformed), when the response has a top-level error code at this version to carry
    it; None when it has not, and the connection is closed instead."""
    from wire.generated.registry import API_SPECS

    response_type = API_SPECS[api_key].response
    response = response_type()
    if not hasattr(response, "error_code"):
        return None
    response.error_code = ErrorCode.INVALID_REQUEST
    try:
        # An ignorable field is dropped silently where the version lacks it (Metadata before v13).
        if getattr(response_type.decode(response.encode(api_version), api_version), "error_code", None) \
                != ErrorCode.INVALID_REQUEST:
            return None
        return encode_response(response, api_version, correlation_id)
    except UnsupportedVersionError:  # the field exists only in later versions
        return None


def error_response(entry: ApiEntry, request: Message, version: int) -> Message | None:
    """A response saying UNKNOWN_SERVER_ERROR, for handlers that failed unexpectedly.

    Handlers answer their own per-partition errors; this covers bugs. Responses with
    a top-level error code get it; others cannot say "failed" and the connection closes.
    """
    from wire.generated.registry import API_SPECS

    cls = API_SPECS[entry.api_key].response
    response = cls()
    if hasattr(response, "error_code"):
        response.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        return response
    return None
