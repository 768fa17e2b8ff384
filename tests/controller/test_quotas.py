"""controller.quotas and ClientQuotaRecord replay: entities, values and describe filters as Kafka's."""

from __future__ import annotations

import pytest

from controller.image import MetadataImage
from controller.quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaError,
    QuotaFilter,
    check_value,
    entity_of,
    matches,
)
from controller.snapshot import image_from_records, image_records
from controller.state import apply
from wire.generated.metadata.rec_014_client_quota_record import (
    ClientQuotaRecord,
    ClientQuotaRecordEntityData,
)


def test_entities_and_values() -> None:
    assert entity_of([("user", "a"), ("client-id", None)]) == (("client-id", None), ("user", "a"))
    for bad in ([], [("user", "a"), ("user", "b")], [("group", "g")], [("ip", "1.2.3.4"), ("user", "a")],
                [("ip", "nope")], [("user", "")]):
        with pytest.raises(QuotaError):
            entity_of(bad)
    check_value((("user", "a"),), "producer_byte_rate", 1024.0)
    check_value((("user", "a"),), "request_percentage", 12.5)
    for key, value in (("producer_byte_rate", 1.5), ("connection_creation_rate", 1.0), ("x", 1.0),
                       ("consumer_byte_rate", 0.0)):
        with pytest.raises(QuotaError):
            check_value((("user", "a"),), key, value)


def test_filters() -> None:
    alice, default_user, both = (("user", "alice"),), (("user", None),), (("client-id", "c"), ("user", "alice"))
    exact = [QuotaFilter("user", MATCH_EXACT, "alice")]
    assert matches(alice, exact, False) and matches(both, exact, False) and not matches(both, exact, True)
    assert matches(default_user, [QuotaFilter("user", MATCH_DEFAULT, None)], False)
    assert not matches(default_user, [QuotaFilter("user", MATCH_SPECIFIED, None)], False)


def test_replay_and_snapshot() -> None:
    def record(key: str, value: float, remove: bool = False) -> ClientQuotaRecord:
        return ClientQuotaRecord(entity=[ClientQuotaRecordEntityData(entity_type="user", entity_name="a")],
                                 key=key, value=value, remove=remove)

    image = apply(MetadataImage(), record("producer_byte_rate", 100.0), 0)
    image = apply(image, record("consumer_byte_rate", 200.0), 1)
    assert image.client_quotas == {(("user", "a"),): {"producer_byte_rate": 100.0, "consumer_byte_rate": 200.0}}
    assert image_from_records(image_records(image), 2).client_quotas == image.client_quotas
    image = apply(image, record("producer_byte_rate", 0.0, remove=True), 2)
    image = apply(image, record("consumer_byte_rate", 0.0, remove=True), 3)
    assert image.client_quotas == {}
