"""One poll of the cluster: Metadata, DescribeCluster, DescribeQuorum, offsets, log dir sizes,
``min.insync.replicas``, groups with their committed offsets, and the metrics endpoints.

Each part that fails leaves its fields empty and adds a line to ``Snapshot.errors``,
so a page still shows what could be read.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from broker.console.kafka import ClusterClient
from broker.console.metrics_source import MetricsScraper
from broker.console.snapshot import (
    BrokerView,
    GroupView,
    History,
    MemberView,
    MetricsView,
    PartitionLag,
    PartitionView,
    QuorumView,
    Snapshot,
    TopicView,
    TransactionView,
    VoterView,
)
from broker.tools.client import ClientError
from wire.errors import ErrorCode
from wire.exceptions import DecodeError
from wire.generated.api_002_list_offsets import (
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsRequestListOffsetsTopic,
    ListOffsetsResponse,
)
from wire.generated.api_009_offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from wire.generated.api_015_describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseDescribedGroup,
)
from wire.generated.api_016_list_groups import ListGroupsRequest, ListGroupsResponse
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
)
from wire.generated.api_035_describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from wire.generated.api_055_describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumRequestPartitionData,
    DescribeQuorumRequestTopicData,
    DescribeQuorumResponse,
    DescribeQuorumResponseReplicaState,
)
from wire.generated.api_060_describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wire.generated.api_065_describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from wire.generated.api_066_list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from wire.generated.api_069_consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseDescribedGroup,
)
from wire.generated.api_077_share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupDescribeResponseDescribedGroup,
)
from wire.generated.data.consumer_protocol_assignment import ConsumerProtocolAssignment

LATEST = -1
EARLIEST = -2
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
METADATA_TOPIC = "__cluster_metadata"
#: DescribeGroups names this many groups per request.
GROUPS_PER_REQUEST = 50

Offsets = dict[tuple[str, int], int]


def kafka_uuid(raw: bytes) -> str:
    """A topic id as Kafka prints it: URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The partitions of a consumer-protocol assignment (every version starts like v0)."""
    if len(data) < 2:
        return ()
    try:
        assignment = ConsumerProtocolAssignment.decode(data[2:], 0)
    except (DecodeError, ValueError):
        return ()
    return tuple(sorted((tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions))


@dataclass(slots=True)
class Collector:
    """Builds snapshots; keeps what rates and "seen since" need between polls."""

    client: ClusterClient
    scraper: MetricsScraper | None = None
    clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    history: History = field(default_factory=History)
    _seen_since: dict[int, int] = field(default_factory=dict)
    _previous_ends: dict[str, tuple[int, int]] = field(default_factory=dict)
    _generation: int = 0

    def collect(self) -> Snapshot:
        now = self.clock_ms()
        errors: list[str] = []
        metadata = self.client.metadata(None)
        cluster_id, controller_id = metadata.cluster_id or "", metadata.controller_id
        racks = {b.node_id: b.rack for b in metadata.brokers}
        try:
            described = self.client.any_broker(DescribeClusterRequest(), DescribeClusterResponse)
            if described.error_code == ErrorCode.NONE:
                cluster_id, controller_id = described.cluster_id, described.controller_id
                racks.update({b.broker_id: b.rack for b in described.brokers})
        except ClientError as ex:
            errors.append(f"DescribeCluster: {ex}")
        live = {b.node_id for b in metadata.brokers}
        self._seen_since = {n: self._seen_since.get(n, now) for n in live}
        brokers = tuple(BrokerView(b.node_id, b.host, b.port, racks.get(b.node_id), b.node_id == controller_id,
                                   self._seen_since[b.node_id])
                        for b in sorted(metadata.brokers, key=lambda b: b.node_id))

        layout: dict[str, list[tuple[int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]] = {}
        ids: dict[str, str] = {}
        internal: dict[str, bool] = {}
        for t in metadata.topics:
            if t.error_code != ErrorCode.NONE or not t.name:
                continue
            ids[t.name], internal[t.name] = kafka_uuid(t.topic_id.bytes), t.is_internal
            layout[t.name] = sorted((p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                                     tuple(p.isr_nodes), tuple(p.offline_replicas)) for p in t.partitions)
        leaders = {(name, p[0]): p[1] for name, parts in layout.items() for p in parts}
        starts = self._offsets(leaders, EARLIEST, errors)
        ends = self._offsets(leaders, LATEST, errors)
        sizes = self._sizes(live, errors)
        min_isr = self._min_isr(list(layout), errors)

        topics: dict[str, TopicView] = {}
        for name in sorted(layout):
            parts = tuple(PartitionView(
                topic=name, partition=index, leader=leader, leader_epoch=epoch, replicas=replicas, isr=isr,
                offline_replicas=offline, log_start=starts.get((name, index)), log_end=ends.get((name, index)),
                size_bytes=sizes.get((name, index)), min_isr=min_isr.get(name, 1),
                missing_replicas=tuple(r for r in replicas if r not in live))
                for index, leader, epoch, replicas, isr, offline in layout[name])
            topic = TopicView(name, ids[name], internal[name], parts)
            topics[name] = TopicView(name, ids[name], internal[name], parts, self._rate(name, topic.end_offsets, now))
        self._previous_ends = {n: v for n, v in self._previous_ends.items() if n in topics}

        groups = self._groups(ends, errors)
        transactions, transactions_supported = self._transactions(live, errors)
        quorum = self._quorum(errors)
        metrics = self.scraper.scrape(now) if self.scraper is not None else None
        self._record_history(now, topics, groups, metrics)
        self._generation += 1
        return Snapshot(taken_ms=now, cluster_id=cluster_id, controller_id=controller_id, brokers=brokers,
                        topics=topics, groups=groups, quorum=quorum, metrics=metrics, errors=tuple(errors),
                        generation=self._generation, transactions=transactions,
                        transactions_supported=transactions_supported)

    def _rate(self, topic: str, end: int, now: int) -> float | None:
        previous = self._previous_ends.get(topic)
        self._previous_ends[topic] = (now, end)
        if previous is None or now <= previous[0]:
            return None
        return max(end - previous[1], 0) * 1000 / (now - previous[0])

    def _record_history(self, now: int, topics: dict[str, TopicView], groups: dict[str, GroupView],
                        metrics: MetricsView | None) -> None:
        for group in groups.values():
            self.history.add("lag:" + group.group_id, now, group.total_lag)
        self.history.keep_only("lag:", set(groups))
        total_rate = sum(t.records_per_s or 0 for t in topics.values())
        self.history.add("cluster:records_in", now, total_rate)
        if metrics is not None and metrics.intervals:
            self.history.add("metrics:produce_records", now, metrics.produce_records_per_s)
            self.history.add("metrics:fetch_bytes", now, metrics.fetch_bytes_per_s)
            if metrics.request_latency_mean_ms is not None:
                self.history.add("metrics:latency_mean", now, metrics.request_latency_mean_ms)
            if metrics.request_latency_p99_ms is not None:
                self.history.add("metrics:latency_p99", now, metrics.request_latency_p99_ms)

    def _offsets(self, leaders: dict[tuple[str, int], int], timestamp: int, errors: list[str]) -> Offsets:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp, leader in leaders.items():
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
        out: Offsets = {}
        for leader, tps in sorted(by_leader.items()):
            out.update(list_offsets(self.client, leader, tps, timestamp, errors))
        return out

    def _sizes(self, live: set[int], errors: list[str]) -> Offsets:
        """Partition sizes from every broker's DescribeLogDirs (the largest replica's)."""
        out: Offsets = {}
        for node in sorted(live):
            try:
                response = self.client.broker(node, DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
            except ClientError as ex:
                errors.append(f"DescribeLogDirs on broker {node}: {ex}")
                continue
            for result in response.results:
                for t in result.topics:
                    for p in t.partitions:
                        if not p.is_future_key:
                            key = (t.name, p.partition_index)
                            out[key] = max(out.get(key, 0), p.partition_size)
        return out

    def _min_isr(self, topics: list[str], errors: list[str]) -> dict[str, int]:
        if not topics:
            return {}
        request = DescribeConfigsRequest(resources=[
            DescribeConfigsRequestDescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t,
                                                          configuration_keys=["min.insync.replicas"])
            for t in topics])
        try:
            response = self.client.any_broker(request, DescribeConfigsResponse)
        except ClientError as ex:
            errors.append(f"DescribeConfigs: {ex}")
            return {}
        out: dict[str, int] = {}
        for result in response.results:
            for entry in result.configs:
                if entry.name == "min.insync.replicas" and entry.value and entry.value.isdigit():
                    out[result.resource_name] = int(entry.value)
        return out

    def _quorum(self, errors: list[str]) -> QuorumView | None:
        request = DescribeQuorumRequest(topics=[DescribeQuorumRequestTopicData(
            topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequestPartitionData(partition_index=0)])])
        try:
            reply = self.client.any_broker(request, DescribeQuorumResponse)
        except ClientError as ex:
            errors.append(f"DescribeQuorum: {ex}")
            return None
        part = reply.topics[0].partitions[0] if reply.topics and reply.topics[0].partitions else None
        if reply.error_code != ErrorCode.NONE or part is None or part.error_code != ErrorCode.NONE:
            code = reply.error_code if part is None or reply.error_code else part.error_code
            errors.append(f"DescribeQuorum: {ErrorCode.for_code(code).name}")
            return None
        leader_end = max((v.log_end_offset for v in part.current_voters if v.replica_id == part.leader_id),
                         default=part.high_watermark)

        def view(state: DescribeQuorumResponseReplicaState, role: str) -> VoterView:
            lag = max(leader_end - state.log_end_offset, 0) if state.log_end_offset >= 0 else None
            return VoterView(state.replica_id, state.log_end_offset, lag, state.last_caught_up_timestamp,
                             "Leader" if state.replica_id == part.leader_id else role)

        return QuorumView(part.leader_id, part.leader_epoch, part.high_watermark,
                          tuple(view(v, "Follower") for v in part.current_voters),
                          tuple(view(o, "Observer") for o in part.observers))

    def _transactions(self, live: set[int], errors: list[str]) -> tuple[tuple[TransactionView, ...], bool]:
        """ListTransactions at every broker (each lists those it coordinates), then DescribeTransactions there."""
        out: list[TransactionView] = []
        for node in sorted(live):
            try:
                self.client.broker_version(node, ListTransactionsRequest.API_KEY)
            except ClientError as ex:
                if "does not support" in str(ex):
                    return (), False
                errors.append(f"ListTransactions on broker {node}: {ex}")
                continue
            try:
                listed = self.client.broker(node, ListTransactionsRequest(), ListTransactionsResponse)
                ids = sorted(t.transactional_id for t in listed.transaction_states)
                if not ids:
                    continue
                described = self.client.broker(node, DescribeTransactionsRequest(transactional_ids=ids),
                                               DescribeTransactionsResponse)
            except ClientError as ex:
                errors.append(f"transactions on broker {node}: {ex}")
                continue
            out.extend(TransactionView(
                t.transactional_id, node, t.producer_id, t.producer_epoch, t.transaction_state,
                t.transaction_timeout_ms, t.transaction_start_time_ms,
                tuple(sorted((d.topic, p) for d in t.topics for p in d.partitions)))
                for t in described.transaction_states if t.error_code == ErrorCode.NONE)
        return tuple(sorted(out, key=lambda t: t.transactional_id)), True

    def _groups(self, ends: Offsets, errors: list[str]) -> dict[str, GroupView]:
        try:
            listed = self.client.any_broker(ListGroupsRequest(), ListGroupsResponse)
        except ClientError as ex:
            errors.append(f"ListGroups: {ex}")
            return {}
        # ListGroups answers for the groups its broker coordinates; ask every broker.
        entries = {g.group_id: g for g in listed.groups}
        for node in sorted(self._seen_since):
            try:
                more = self.client.broker(node, ListGroupsRequest(), ListGroupsResponse)
            except ClientError as ex:
                errors.append(f"ListGroups on broker {node}: {ex}")
                continue
            entries.update({g.group_id: g for g in more.groups})
        by_coordinator: dict[tuple[str, int], list[str]] = {}
        out: dict[str, GroupView] = {}
        try:
            found = self.client.coordinators(sorted(entries)) if entries else {}
        except ClientError as ex:
            errors.append(f"FindCoordinator: {ex}")
            found = {}
        for group_id in sorted(entries):
            where = found.get(group_id, "COORDINATOR_NOT_AVAILABLE")
            if isinstance(where, tuple):
                by_coordinator.setdefault(where, []).append(group_id)
                continue
            listed_group = entries[group_id]
            out[group_id] = GroupView(group_id, listed_group.group_state or "Unknown",
                                      listed_group.group_type or "classic", listed_group.protocol_type, "",
                                      "-", (), (), error=f"FindCoordinator: {where}")
        for (host, port), ids in by_coordinator.items():
            for i in range(0, len(ids), GROUPS_PER_REQUEST):
                chunk = ids[i:i + GROUPS_PER_REQUEST]
                try:
                    described = self.client.address(host, port, DescribeGroupsRequest(groups=chunk),
                                                     DescribeGroupsResponse)
                except ClientError as ex:
                    errors.append(f"DescribeGroups on {host}:{port}: {ex}")
                    continue
                try:
                    committed = fetch_committed_many(self.client, host, port, chunk)
                except ClientError as ex:
                    errors.append(f"OffsetFetch on {host}:{port}: {ex}")
                    committed = {}
                for g in described.groups:
                    entry = entries.get(g.group_id)
                    offsets = committed.get(g.group_id, {})
                    error = None if g.error_code == ErrorCode.NONE else ErrorCode.for_code(g.error_code).name
                    if isinstance(offsets, str):
                        offsets, error = {}, f"OffsetFetch: {offsets}"
                    out[g.group_id] = group_view(g, entry.group_type if entry else "", f"{host}:{port}",
                                                 offsets, ends, error)
            # KIP-848 consumer groups and share groups: their members come from their own describe APIs.
            for kind in ("consumer", "share"):
                modern = [g for g in ids if (entries[g].group_type or "").lower() == kind]
                if modern:
                    self._describe_modern(kind, host, port, modern, ends, out, errors)
        return dict(sorted(out.items()))

    def _describe_modern(self, kind: str, host: str, port: int, ids: list[str], ends: Offsets,
                         out: dict[str, GroupView], errors: list[str]) -> None:
        api = "ConsumerGroupDescribe" if kind == "consumer" else "ShareGroupDescribe"
        try:
            described: list[ConsumerGroupDescribeResponseDescribedGroup] | list[ShareGroupDescribeResponseDescribedGroup]
            if kind == "consumer":
                described = self.client.address(host, port, ConsumerGroupDescribeRequest(group_ids=ids),
                                                 ConsumerGroupDescribeResponse).groups
            else:
                described = self.client.address(host, port, ShareGroupDescribeRequest(group_ids=ids),
                                                 ShareGroupDescribeResponse).groups
        except ClientError as ex:
            errors.append(f"{api} on {host}:{port}: {ex}")
            return
        for g in described:
            before = out.get(g.group_id)
            if g.error_code != ErrorCode.NONE:
                error = f"{api}: {ErrorCode.for_code(g.error_code).name}"
                if before is not None:
                    out[g.group_id] = replace(before, group_type=kind, error=error)
                continue
            members = tuple(MemberView(
                m.member_id, getattr(m, "instance_id", None), m.client_id, m.client_host,
                tuple(sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions)))
                for m in g.members)
            owner = {tp: m.member_id for m in members for tp in m.assignment}
            committed = {(p.topic, p.partition): p.committed for p in before.offsets
                         if p.committed is not None} if before is not None else {}
            offsets = tuple(PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p), ""))
                            for t, p in sorted(set(committed) | set(owner)))
            out[g.group_id] = GroupView(g.group_id, g.group_state, kind, kind, g.assignor_name,
                                        f"{host}:{port}", members, offsets,
                                        # DescribeGroups' view of this group is replaced; OffsetFetch's error stays.
                                        before.error if before is not None and before.error and
                                        before.error.startswith("OffsetFetch") else None)


def group_view(g: DescribeGroupsResponseDescribedGroup, group_type: str, coordinator: str, committed: Offsets,
               ends: Offsets, error: str | None) -> GroupView:
    members = tuple(MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               parse_assignment(m.member_assignment) if g.protocol_type == "consumer" else ())
                    for m in g.members)
    owner = {tp: m.member_id for m in members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    offsets = tuple(PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p), ""))
                    for t, p in partitions)
    return GroupView(g.group_id, g.group_state, group_type or "classic", g.protocol_type, g.protocol_data,
                     coordinator, members, offsets, error)


def fetch_committed(client: ClusterClient, host: str, port: int, group_id: str) -> Offsets:
    """Every committed offset of one group."""
    found = fetch_committed_many(client, host, port, [group_id])[group_id]
    if isinstance(found, str):
        raise ClientError(f"OffsetFetch: {found}")
    return found


def fetch_committed_many(client: ClusterClient, host: str, port: int,
                         groups: list[str]) -> dict[str, Offsets | str]:
    """Every committed offset of each group (all topics), or the error name: from OffsetFetch v8
    one request names every group, before it one request per group."""
    out: dict[str, Offsets | str] = {}
    if client.address_version(host, port, OffsetFetchRequest.API_KEY) >= 8:
        request = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups])
        response = client.address(host, port, request, OffsetFetchResponse)
        for g in response.groups:
            out[g.group_id] = ErrorCode.for_code(g.error_code).name if g.error_code != ErrorCode.NONE else {
                (t.name, p.partition_index): p.committed_offset
                for t in g.topics for p in t.partitions if p.committed_offset >= 0}
    else:
        for group_id in groups:
            r = client.address(host, port, OffsetFetchRequest(group_id=group_id, topics=None), OffsetFetchResponse,
                               min(client.address_version(host, port, OffsetFetchRequest.API_KEY), 7))
            out[group_id] = ErrorCode.for_code(r.error_code).name if r.error_code != ErrorCode.NONE else {
                (t.name, p.partition_index): p.committed_offset
                for t in r.topics for p in t.partitions if p.committed_offset >= 0}
    for group_id in groups:
        out.setdefault(group_id, "no answer")
    return out


def list_offsets(client: ClusterClient, leader: int, tps: list[tuple[str, int]], timestamp: int,
                 errors: list[str]) -> Offsets:
    """ListOffsets of ``tps`` at their leader: EARLIEST, LATEST or a time in ms."""
    topics = sorted({t for t, _ in tps})
    request = ListOffsetsRequest(replica_id=-1, topics=[
        ListOffsetsRequestListOffsetsTopic(name=t, partitions=[
            ListOffsetsRequestListOffsetsPartition(partition_index=p, timestamp=timestamp)
            for tt, p in tps if tt == t])
        for t in topics])
    try:
        response = client.broker(leader, request, ListOffsetsResponse)
    except ClientError as ex:
        errors.append(f"ListOffsets on broker {leader}: {ex}")
        return {}
    return {(rt.name, rp.partition_index): rp.offset
            for rt in response.topics for rp in rt.partitions if rp.error_code == ErrorCode.NONE}
