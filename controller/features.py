"""Cluster features (KIP-584, KIP-1022): what this software supports, what a cluster starts
with, and Kafka's rules for changing a finalized level (UpdateFeatures).

A finalized level is a ``FeatureLevelRecord`` in the metadata log; level 0 removes the
feature (it reads as 0). ``metadata.version`` is always finalized and never downgraded.
The levels mean what they mean in Kafka 4:

- ``metadata.version`` 7 (3.3-IV3) to 30 (4.3-IV0, what a new Kafka 4.3 cluster is
  formatted with); no level changes what Cormorant writes to its metadata log.
- ``group.version`` 1: the consumer rebalance protocol (KIP-848) is served.
- ``transaction.version`` 1: flexible transaction log records; 2: transactions v2
  (KIP-890: an epoch bump on every EndTxn, partitions added by Produce).
- ``share.version`` 1: share groups (KIP-932) are served; 2: share groups' dead-letter
  topics (KIP-1191, Kafka 4.4) are written too.
- ``kraft.version``: supported at 0 only; the metadata quorum is not Kafka's Raft, so
  its dynamic-quorum level (1) has no meaning here.

As in Kafka 4.3 (GroupVersion, TransactionVersion, ShareVersion), none of the three
group, transaction and share levels depends on another feature; each has the
metadata.version from which a cluster formatted at that release starts with it
(``bootstrap_metadata_version``). ``share.version`` 2 is Kafka 4.4's SV_2: no
dependency, bootstrapped from 4.4-IV0, past the metadata.version this software offers,
so a new cluster starts at share.version 1 (Kafka's latest production level, as in 4.3
and 4.4) and UpdateFeatures raises it. Kafka 4.3's ``eligible.leader.replicas.version``
and ``streams.version`` are not offered: Cormorant serves neither eligible leader
replicas (KIP-966) nor streams groups (KIP-1071).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from wire.errors import ErrorCode
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"

#: Kafka's metadata.version levels and their release names (MetadataVersion).
METADATA_VERSION_NAMES: Mapping[int, str] = {
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1",
    14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4", 20: "3.8-IV0",
    21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1",
    28: "4.2-IV0", 29: "4.2-IV1", 30: "4.3-IV0",
}
#: metadata.version of Kafka 3.9 (what clusters before features other than it were written with).
METADATA_VERSION_3_9 = 21
#: The highest metadata.version this software supports, and what a new cluster starts at
#: (Kafka 4.3's latest production level).
METADATA_VERSION_LATEST = 30
#: Kafka 4.4-IV0 (not offered here): where Kafka bootstraps share.version 2 from.
METADATA_VERSION_4_4_IV0 = 31

# UpdateFeatures upgrade types (v1+); v0's AllowDowngrade maps to SAFE_DOWNGRADE.
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    name: str
    min_level: int
    max_level: int
    #: The level a new cluster starts with.
    default_level: int
    #: level -> {feature: lowest level it needs}
    dependencies: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    #: level -> the metadata.version from which a new cluster starts with it (Kafka's
    #: bootstrapMetadataVersion); what ``--release-version`` implies for the feature.
    bootstrap_metadata_version: Mapping[int, int] = field(default_factory=dict)


FEATURES: Mapping[str, FeatureSpec] = {
    f.name: f
    for f in (
        FeatureSpec(METADATA_VERSION, 7, METADATA_VERSION_LATEST, METADATA_VERSION_LATEST),
        FeatureSpec(KRAFT_VERSION, 0, 0, 0),
        FeatureSpec(GROUP_VERSION, 0, 1, 1, bootstrap_metadata_version={1: 22}),
        FeatureSpec(TRANSACTION_VERSION, 0, 2, 2, bootstrap_metadata_version={1: 24, 2: 24}),
        FeatureSpec(SHARE_VERSION, 0, 2, 1, bootstrap_metadata_version={1: 28, 2: METADATA_VERSION_4_4_IV0}),
    )
}


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    max_version_level: int
    upgrade_type: int = UPGRADE


def level(features: Mapping[str, int], name: str) -> int:
    """A feature's finalized level (0 when not finalized)."""
    return features.get(name, 0)


def default_level(spec: FeatureSpec, metadata_version: int) -> int:
    """Kafka's ``Feature.defaultLevel``: the feature's highest level a cluster formatted at
    ``metadata_version`` starts with."""
    if spec.name == METADATA_VERSION:
        return metadata_version
    levels = [lvl for lvl, mv in spec.bootstrap_metadata_version.items() if mv <= metadata_version]
    return max(levels, default=spec.min_level)


def finalized(features: Mapping[str, int]) -> dict[str, int]:
    """The finalized features as ApiVersions lists them: those above level 0."""
    return {name: lvl for name, lvl in sorted(features.items()) if lvl > 0}


def bootstrap_records(features: Mapping[str, int]) -> list[FeatureLevelRecord]:
    """What a cluster is given when it starts: every feature at its default on a new cluster.

    A cluster written before features other than metadata.version existed (at 3.9-IV0, and
    serving the consumer protocol, share groups and 3.9's transactions all along) is moved
    once to this software's levels; afterwards levels change only by UpdateFeatures.
    """
    current = features.get(METADATA_VERSION)
    if current is not None and (current > METADATA_VERSION_3_9 or len(features) > 1):
        return []
    return [FeatureLevelRecord(name=f.name, feature_level=f.default_level)
            for f in FEATURES.values() if f.default_level > 0 and features.get(f.name) != f.default_level]


def plan_update(
    features: Mapping[str, int], updates: Sequence[FeatureUpdate]
) -> tuple[ErrorCode, str | None, list[FeatureLevelRecord]]:
    """Kafka's FeatureControlManager.updateFeatures: all updates or none. Returns the error
    (NONE), its message and the records to write."""
    names = [u.feature for u in updates]
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "The request contains multiple updates for the same feature.", []
    proposed = dict(features)
    records: list[FeatureLevelRecord] = []
    for u in updates:
        error = _check_update(features, u)
        if error is not None:
            return ErrorCode.INVALID_UPDATE_VERSION, error, []
        proposed[u.feature] = u.max_version_level
        records.append(FeatureLevelRecord(name=u.feature, feature_level=u.max_version_level))
    for name, lvl in proposed.items():
        spec = FEATURES.get(name)
        if spec is None:
            continue
        for needed, needed_level in spec.dependencies.get(lvl, {}).items():
            if level(proposed, needed) < needed_level:
                return (ErrorCode.INVALID_UPDATE_VERSION,
                        f"Invalid update version {lvl} for feature {name}. {name} has a dependency on "
                        f"{needed} with a version level of at least {needed_level}.", [])
    return ErrorCode.NONE, None, [r for r in records if features.get(r.name, 0) != r.feature_level]


def _check_update(features: Mapping[str, int], u: FeatureUpdate) -> str | None:
    spec = FEATURES.get(u.feature)
    if u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"Unknown upgrade type {u.upgrade_type}."
    if spec is None:
        return f"Invalid update version {u.max_version_level} for feature {u.feature}. The controller does not support the given feature."
    current = level(features, u.feature)
    if u.feature == METADATA_VERSION:
        if u.max_version_level < current:
            return f"Invalid metadata.version {u.max_version_level}. Unsafe metadata downgrade is not supported in this version."
        if u.max_version_level < spec.min_level:
            return f"Invalid metadata.version {u.max_version_level}. The minimum supported is {spec.min_level}."
    if not (u.max_version_level == 0 or spec.min_level <= u.max_version_level <= spec.max_level):
        return (f"Invalid update version {u.max_version_level} for feature {u.feature}. "
                f"The controller supports levels {spec.min_level}-{spec.max_level}.")
    if u.feature == KRAFT_VERSION and u.max_version_level != current:
        return "kraft.version cannot be changed: this metadata quorum is not Kafka's Raft."
    if u.max_version_level < current and u.upgrade_type == UPGRADE:
        return (f"Invalid update version {u.max_version_level} for feature {u.feature}. Can't downgrade the "
                "version of this feature without setting the upgrade type to either safe or unsafe downgrade.")
    if u.max_version_level > current and u.upgrade_type != UPGRADE:
        return (f"Invalid update version {u.max_version_level} for feature {u.feature}. "
                "Can't downgrade to a newer version.")
    return None
