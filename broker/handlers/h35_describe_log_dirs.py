"""DescribeLogDirs (35), v0-4: this broker's log directories and the partitions in each.

A null topic list means every partition. For each configured directory
(absolute path): the partitions it holds with their size in bytes and offset
lag (how far the log end is below the high watermark: 0 on a healthy replica,
-1 when the replica is not hosted); ``is_future_key`` is always false, as
Cormorant does not move replicas between directories. Topics without a
requested partition in a directory are left out. A directory that cannot be
read answers KAFKA_STORAGE_ERROR. v2+ flexible; v3+ a top-level error code;
v4+ the file system's total and usable bytes (KIP-827).
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from broker.security.acl_operations import AclOperation, authorize_cluster
from broker.server.dispatch import RequestContext
from wire.errors import ErrorCode
from wire.generated.api_035_describe_log_dirs import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponseDescribeLogDirsPartition,
    DescribeLogDirsResponseDescribeLogDirsResult,
    DescribeLogDirsResponseDescribeLogDirsTopic,
)

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4

log = structlog.get_logger(__name__)

INVALID_OFFSET_LAG = -1
LONG_MAX = 2**63 - 1


def _space(directory: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``directory``, as Java's FileStore reports."""
    st = os.statvfs(directory)
    total = st.f_blocks * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    return min(total, LONG_MAX), min(usable, LONG_MAX)


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    services = ctx.services
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, dict[str, list[DescribeLogDirsResponseDescribeLogDirsPartition]]] = {}
    for tp, plog in services.log_manager.logs.items():
        if wanted is not None and (tp.topic, tp.partition) not in wanted:
            continue
        partition = services.replica_manager.get(tp.topic, tp.partition)
        lag = INVALID_OFFSET_LAG if partition is None else max(partition.high_watermark - plog.log_end_offset, 0)
        by_dir.setdefault(plog.dir.parent.absolute(), {}).setdefault(tp.topic, []).append(
            DescribeLogDirsResponseDescribeLogDirsPartition(
                partition_index=tp.partition, partition_size=plog.size, offset_lag=lag, is_future_key=False
            )
        )
    response = DescribeLogDirsResponse()
    for directory in services.log_manager.log_dirs:
        path = directory.absolute()
        result = DescribeLogDirsResponseDescribeLogDirsResult(log_dir=str(path))
        try:
            total, usable = _space(path)
        except OSError as ex:
            log.warning("log_dir_unreadable", log_dir=str(path), error=str(ex))
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            response.results.append(result)
            continue
        if ctx.api_version >= 4:
            result.total_bytes, result.usable_bytes = total, usable
        for topic, partitions in sorted(by_dir.get(path, {}).items()):
            result.topics.append(DescribeLogDirsResponseDescribeLogDirsTopic(
                name=topic, partitions=sorted(partitions, key=lambda p: p.partition_index)))
        response.results.append(result)
    return response
