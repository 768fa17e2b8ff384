"""Which partition of an internal topic holds a key: Kafka's exact arithmetic.

Clients never compute this, but every broker must agree with every other (and
with Kafka, for data moved between them): ``Utils.abs(key.hashCode()) %
partitions``, where ``hashCode`` is Java's ``String.hashCode`` over UTF-16
code units and ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0.
"""

from __future__ import annotations

import functools

_INT32_MIN = -(2**31)


@functools.lru_cache(maxsize=16384)
def java_string_hash(text: str) -> int:
    """``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` in int32 arithmetic."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` gives 0."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(key: str, partitions: int) -> int:
    return kafka_abs(java_string_hash(key)) % partitions
