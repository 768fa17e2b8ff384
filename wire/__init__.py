"""Cormorant's sans-I/O Kafka protocol codec.

Bytes in, typed messages out, and back. Nothing here does I/O, imports Trio, or
imports anything else of Cormorant's.
"""

from wire.accel import enable_by_default as _enable_by_default

_enable_by_default()
