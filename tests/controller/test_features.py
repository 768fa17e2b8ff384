"""Cluster features as Kafka 4.3 declares them: metadata.version levels up to 4.3-IV0, what a
new cluster starts with, each feature's level for a release, and UpdateFeatures' rules
(no dependency between group, transaction and share levels; metadata.version only up)."""

from __future__ import annotations

from controller.features import (
    FEATURES,
    GROUP_VERSION,
    METADATA_VERSION,
    METADATA_VERSION_LATEST,
    METADATA_VERSION_NAMES,
    SAFE_DOWNGRADE,
    SHARE_VERSION,
    TRANSACTION_VERSION,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
    bootstrap_records,
    default_level,
    plan_update,
)
from wire.errors import ErrorCode

#: What a cluster formatted by this software before 4.1's levels were known is finalized at.
AT_4_0 = {METADATA_VERSION: 25, GROUP_VERSION: 1, TRANSACTION_VERSION: 2, SHARE_VERSION: 1}


def test_levels_and_names_of_kafka_4_1_to_4_3() -> None:
    assert {lvl: METADATA_VERSION_NAMES[lvl] for lvl in range(25, 31)} == {
        25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1", 30: "4.3-IV0"}
    assert METADATA_VERSION_LATEST == 30 == max(METADATA_VERSION_NAMES)
    spec = FEATURES[METADATA_VERSION]
    assert (spec.min_level, spec.max_level, spec.default_level) == (7, 30, 30)


def test_a_new_cluster_starts_as_a_new_kafka_4_3_cluster() -> None:
    started = {r.name: r.feature_level for r in bootstrap_records({})}
    assert started == {METADATA_VERSION: 30, GROUP_VERSION: 1, TRANSACTION_VERSION: 2, SHARE_VERSION: 1}


def test_a_cluster_finalized_at_4_0_keeps_its_levels_and_upgrades_online() -> None:
    assert bootstrap_records(AT_4_0) == []
    error, message, records = plan_update(AT_4_0, [FeatureUpdate(METADATA_VERSION, 30)])
    assert (error, message) == (ErrorCode.NONE, None)
    assert [(r.name, r.feature_level) for r in records] == [(METADATA_VERSION, 30)]
    for level in (26, 27, 28, 29):
        assert plan_update(AT_4_0, [FeatureUpdate(METADATA_VERSION, level)])[0] is ErrorCode.NONE


def test_metadata_version_is_never_lowered_nor_raised_past_4_3() -> None:
    at_4_3 = {**AT_4_0, METADATA_VERSION: 30}
    for kind in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        error, message, _ = plan_update(at_4_3, [FeatureUpdate(METADATA_VERSION, 29, kind)])
        assert error is ErrorCode.INVALID_UPDATE_VERSION, kind
    error, message, _ = plan_update(at_4_3, [FeatureUpdate(METADATA_VERSION, 31)])
    assert error is ErrorCode.INVALID_UPDATE_VERSION and message is not None and "7-30" in message


def test_no_feature_depends_on_another_as_in_kafka() -> None:
    # Kafka 4.3's GroupVersion, TransactionVersion and ShareVersion declare no dependencies.
    at_3_9 = {METADATA_VERSION: 21}
    updates = [FeatureUpdate(GROUP_VERSION, 1), FeatureUpdate(TRANSACTION_VERSION, 2), FeatureUpdate(SHARE_VERSION, 1)]
    error, _, records = plan_update(at_3_9, updates)
    assert error is ErrorCode.NONE and len(records) == 3


def test_each_feature_at_the_level_of_a_release() -> None:
    levels = {mv: {name: default_level(spec, mv) for name, spec in FEATURES.items()} for mv in (21, 22, 25, 27, 28, 30)}
    assert levels[21] == {METADATA_VERSION: 21, "kraft.version": 0, GROUP_VERSION: 0, TRANSACTION_VERSION: 0,
                          SHARE_VERSION: 0}
    assert levels[22][GROUP_VERSION] == 1 and levels[22][TRANSACTION_VERSION] == 0
    assert (levels[25][TRANSACTION_VERSION], levels[25][SHARE_VERSION]) == (2, 0)
    assert levels[27][SHARE_VERSION] == 0  # share groups were a preview in 4.1
    assert levels[28][SHARE_VERSION] == 1
    assert levels[30] == {METADATA_VERSION: 30, "kraft.version": 0, GROUP_VERSION: 1, TRANSACTION_VERSION: 2,
                          SHARE_VERSION: 1}


def test_share_version_2_is_kafka_4_4s_dead_letter_level_raised_only_by_update_features() -> None:
    # Kafka 4.4's ShareVersion.SV_2: no dependency, bootstrapped from 4.4-IV0, which is past
    # the metadata.version this software offers, so no new cluster starts with it.
    spec = FEATURES[SHARE_VERSION]
    assert (spec.min_level, spec.max_level, spec.default_level) == (0, 2, 1)
    assert spec.dependencies == {}
    assert default_level(spec, METADATA_VERSION_LATEST) == 1
    at_4_3 = {**AT_4_0, METADATA_VERSION: 30}
    error, _, records = plan_update(at_4_3, [FeatureUpdate(SHARE_VERSION, 2)])
    assert error is ErrorCode.NONE and [(r.name, r.feature_level) for r in records] == [(SHARE_VERSION, 2)]
    # no metadata.version is needed for it either (Kafka's SV_2 declares no dependency)
    assert plan_update({METADATA_VERSION: 21}, [FeatureUpdate(SHARE_VERSION, 2)])[0] is ErrorCode.NONE
    error, message, _ = plan_update(at_4_3, [FeatureUpdate(SHARE_VERSION, 3)])
    assert error is ErrorCode.INVALID_UPDATE_VERSION and message is not None and "0-2" in message
    error, _, _ = plan_update({**at_4_3, SHARE_VERSION: 2}, [FeatureUpdate(SHARE_VERSION, 1, SAFE_DOWNGRADE)])
    assert error is ErrorCode.NONE
