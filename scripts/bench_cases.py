"""The cases of the broker load benchmark (scripts/bench, bench_load.py)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

THROUGHPUT_PARTITIONS = 4
#: Partition counts of the partition-scaling rows (1 KiB, acks=1, no compression).
SCALING_PARTITIONS = (1, 16, 128)
SCALING_SIZE = 1024
LATENCY_RATE = 2000
LATENCY_SIZE = 1024
CONNECTIONS = 50
CONNECTIONS_PARTITIONS = 16
CONNECTIONS_SIZE = 1024
MAX_BYTES_PER_RUN = 512 * 1024 * 1024
# Client-side producer queue: bounded, so a run's flush after the timed loop stays short.
QUEUE_KBYTES = 16 * 1024
QUEUE_MESSAGES = 50_000

HEADER = struct.Struct(">QQ")  # sequence number, send time (perf_counter_ns)
CHECKSUM_MOD = 1 << 64


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "throughput" | "latency" | "connections"
    size: int
    partitions: int
    acks: str = "1"
    compression: str = "none"
    connections: int = 1
    rate: int = 0
    linger_ms: int | None = None  # None: librdkafka's default (5 ms)


@dataclass(frozen=True)
class Timing:
    produce_s: float  # timed produce phase of throughput and connection cases
    latency_s: float  # measured part of a latency case
    warmup_s: float  # latency messages left out of the statistics


FULL = Timing(produce_s=2.0, latency_s=3.0, warmup_s=0.5)
QUICK = Timing(produce_s=1.0, latency_s=1.5, warmup_s=0.5)


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for size in (100, 1024, 64 * 1024):
        for acks in ("1", "all"):
            for compression in ("none", "lz4", "zstd"):
                cases.append(
                    Case(
                        name=f"produce {size_label(size)} acks={acks} {compression}",
                        kind="throughput",
                        size=size,
                        partitions=THROUGHPUT_PARTITIONS,
                        acks=acks,
                        compression=compression,
                    )
                )
    for partitions in SCALING_PARTITIONS:
        cases.append(
            Case(
                name=f"produce {size_label(SCALING_SIZE)} acks=1 none, "
                f"{partitions} partition{'s' if partitions > 1 else ''}",
                kind="throughput",
                size=SCALING_SIZE,
                partitions=partitions,
            )
        )
    for partitions, linger_ms in ((1, None), (16, None), (128, None), (1, 0), (16, 0)):
        cases.append(
            Case(
                name=f"latency {size_label(LATENCY_SIZE)} @ {LATENCY_RATE:,} msg/s, "
                f"{partitions} partition{'s' if partitions > 1 else ''}"
                + (f", linger.ms={linger_ms}" if linger_ms is not None else ""),
                kind="latency",
                size=LATENCY_SIZE,
                partitions=partitions,
                acks="all",
                rate=LATENCY_RATE,
                linger_ms=linger_ms,
            )
        )
    cases.append(
        Case(
            name=f"{CONNECTIONS} producers, {size_label(CONNECTIONS_SIZE)} acks=1",
            kind="connections",
            size=CONNECTIONS_SIZE,
            partitions=CONNECTIONS_PARTITIONS,
            connections=CONNECTIONS,
        )
    )
    return cases
