"""Round-trip properties: every API key x every version, requests and responses, and
every metadata and coordinator record: encode then decode gives the same message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.shared import SCHEMAS
from tests.wire.schema_strategies import message_strategy
from wire.generated.registry import API_SPECS, COORDINATOR_RECORDS, METADATA_RECORDS

pytestmark = pytest.mark.skipif(
    not (SCHEMAS / "messages").is_dir(), reason="../shared/kafka-protocol is absent"
)

CASES: list[tuple[type, int]] = []
for spec in API_SPECS.values():
    for version in range(spec.min_version, spec.max_version + 1):
        CASES.append((spec.request, version))
        CASES.append((spec.response, version))
for cls in [*METADATA_RECORDS.values(), *COORDINATOR_RECORDS.values()]:
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        CASES.append((cls, version))


@pytest.mark.parametrize("cls,version", CASES, ids=[f"{c.NAME}-v{v}" for c, v in CASES])
def test_roundtrip(cls: Any, version: int) -> None:
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        msg = data.draw(message_strategy(cls, version))
        encoded = msg.encode(version)
        decoded = cls.decode(encoded, version)
        assert decoded == msg
        assert decoded.encode(version) == encoded

    run()
