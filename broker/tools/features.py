"""``cormorant features``: describe and change the cluster's finalized features, like
kafka-features.sh.

Every action speaks the Kafka protocol through :class:`broker.tools.client.KafkaClient`, so it
works against any Kafka-compatible cluster:

- ``describe``: ApiVersions (v3+) at the bootstrap broker; one line per feature the broker
  supports, with its supported range, finalized level and the features' epoch, in
  kafka-features.sh's words (metadata.version levels by their release names);
- ``upgrade --feature NAME=LEVEL ...`` (and ``--metadata VERSION`` for metadata.version,
  named as ``4.3-IV0`` or by release, ``4.3``), or ``upgrade --release-version VERSION``:
  metadata.version and every other feature at the level a cluster of that release starts
  with (Kafka's ``Feature.defaultLevel``; levels 0 are not sent, as kafka-features.sh);
- ``downgrade --feature NAME=LEVEL ... [--unsafe]``;
- ``disable --feature NAME ...``: a safe downgrade to level 0.

Changes go in one UpdateFeatures request (all or nothing), ``--dry-run`` validates only.
As kafka-features.sh, a line per feature says what was done ("group.version was upgraded
to 1.") or why not, and a failure exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from broker.tools.client import ClientError, KafkaClient
from broker.tools.common import P, add_bootstrap_argument, subcommand_parsers
from controller.features import (
    FEATURES,
    KRAFT_VERSION,
    METADATA_VERSION,
    METADATA_VERSION_NAMES,
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    default_level,
)
from wire.errors import ErrorCode
from wire.generated.api_018_api_versions import ApiVersionsRequest, ApiVersionsResponse
from wire.generated.api_057_update_features import (
    UpdateFeaturesRequest,
    UpdateFeaturesRequestFeatureUpdateKey,
    UpdateFeaturesResponse,
)

EXIT_FAILURE = 1
UPDATE_TIMEOUT_MS = 30_000
SOFTWARE_NAME = "cormorant-features"
SOFTWARE_VERSION = "1"
#: Operation names as kafka-features.sh prints them, by UpdateFeatures upgrade type.
OPERATIONS = {UPGRADE: "upgrade", SAFE_DOWNGRADE: "downgrade", UNSAFE_DOWNGRADE: "downgrade"}


class ToolError(Exception):
    """A failure to report on one line."""


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    features = sub.add_parser("features", help="describe, upgrade, downgrade and disable cluster features")
    fsub = features.add_subparsers(dest="action", required=True)
    fsub.add_parser("describe", help="the supported and finalized levels of every feature")
    upgrade = fsub.add_parser("upgrade", help="raise finalized feature levels")
    upgrade.add_argument("--metadata", metavar="VERSION", help="metadata.version, e.g. 4.3-IV0")
    upgrade.add_argument("--release-version", metavar="VERSION",
                         help="every feature at the level of a release, e.g. 4.3 (metadata.version 4.3-IV0)")
    downgrade = fsub.add_parser("downgrade", help="lower finalized feature levels")
    downgrade.add_argument("--unsafe", action="store_true",
                           help="allow a downgrade that may lose metadata (UNSAFE_DOWNGRADE)")
    disable = fsub.add_parser("disable", help="set features to level 0")
    for p in (upgrade, downgrade):
        p.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                       help="a feature and its new level (repeatable)")
    disable.add_argument("--feature", action="append", default=[], metavar="NAME",
                         help="a feature to disable (repeatable)")
    for p in (upgrade, downgrade, disable):
        p.add_argument("--dry-run", action="store_true", help="validate only, change nothing")
    add_bootstrap_argument(features, subcommand_parsers(features))
    return features


def level_name(feature: str, level: int) -> str:
    """metadata.version levels by release name (Kafka's MetadataVersion), others as numbers."""
    if feature == METADATA_VERSION:
        return METADATA_VERSION_NAMES.get(level, f"UNKNOWN {level}")
    return str(level)


def parse_metadata_version(text: str) -> int:
    """``4.3-IV0`` exactly, or a release (``4.3``) meaning its last level; a bare number too."""
    if text.isdigit():
        return int(text)
    for level, name in sorted(METADATA_VERSION_NAMES.items(), reverse=True):
        if name == text or name.split("-")[0] == text:
            return level
    raise ToolError(f"Unknown metadata.version {text}. Supported metadata.version are "
                    + ", ".join(METADATA_VERSION_NAMES[k] for k in sorted(METADATA_VERSION_NAMES)))


def parse_feature(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ToolError(f"Can't parse feature={text}. It must be in the form feature=level")
    if name == METADATA_VERSION:
        return name, parse_metadata_version(value)
    try:
        return name, int(value)
    except ValueError:
        raise ToolError(f"Can't parse feature={text}. The level must be a number") from None


def run_features(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        with KafkaClient.connect(args.bootstrap_server) as client:
            if args.action == "describe":
                describe(client, out)
                return 0
            return update(client, _updates(args), args.dry_run, out)
    except (ClientError, ToolError) as ex:
        print(f"cormorant features: {ex}", file=err)
        return EXIT_FAILURE


def _updates(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(feature, level, upgrade type) for each change the command line asks for."""
    if args.action == "disable":
        updates = [(name, 0, SAFE_DOWNGRADE) for name in args.feature]
    else:
        kind = UPGRADE if args.action == "upgrade" else (UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE)
        updates = [(*parse_feature(f), kind) for f in args.feature]
        if args.action == "upgrade":
            if args.release_version and (args.metadata or args.feature):
                raise ToolError("Can not specify `release-version` with other feature flags.")
            if args.metadata:
                updates.append((METADATA_VERSION, parse_metadata_version(args.metadata), UPGRADE))
            if args.release_version:
                updates = release_updates(parse_metadata_version(args.release_version))
    if not updates:
        raise ToolError("You must specify at least one feature to " + args.action)
    names = [u[0] for u in updates]
    if len(set(names)) != len(names):
        raise ToolError("A feature was named more than once")
    return updates


def release_updates(metadata_version: int) -> list[tuple[str, int, int]]:
    """metadata.version and each feature at its level for a cluster of that release."""
    updates = [(METADATA_VERSION, metadata_version, UPGRADE)]
    for spec in FEATURES.values():
        if spec.name not in (METADATA_VERSION, KRAFT_VERSION) and default_level(spec, metadata_version) > 0:
            updates.append((spec.name, default_level(spec, metadata_version), UPGRADE))
    return updates


def describe(client: KafkaClient, out: TextIO) -> None:
    response = client.send(ApiVersionsRequest(client_software_name=SOFTWARE_NAME,
                                              client_software_version=SOFTWARE_VERSION), ApiVersionsResponse, 3)
    if response.error_code != ErrorCode.NONE:
        raise ToolError(f"ApiVersions failed: {ErrorCode.for_code(response.error_code).name}")
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    epoch = str(response.finalized_features_epoch) if response.finalized_features_epoch >= 0 else "-"
    for f in sorted(response.supported_features, key=lambda f: f.name):
        print(f"Feature: {f.name}\tSupportedMinVersion: {level_name(f.name, f.min_version)}\t"
              f"SupportedMaxVersion: {level_name(f.name, f.max_version)}\t"
              f"FinalizedVersionLevel: {level_name(f.name, finalized.get(f.name, 0))}\tEpoch: {epoch}", file=out)


def update(client: KafkaClient, updates: Sequence[tuple[str, int, int]], dry_run: bool, out: TextIO) -> int:
    version = client.version_for(UpdateFeaturesRequest.API_KEY)
    # v0 says AllowDowngrade, v1+ the upgrade type.
    request = UpdateFeaturesRequest(timeout_ms=UPDATE_TIMEOUT_MS, validate_only=dry_run, feature_updates=[
        UpdateFeaturesRequestFeatureUpdateKey(feature=name, max_version_level=level,
                                              upgrade_type=kind if version >= 1 else UPGRADE,
                                              allow_downgrade=version == 0 and kind != UPGRADE)
        for name, level, kind in updates])
    if dry_run and version < 1:
        raise ToolError("--dry-run needs UpdateFeatures v1")
    response = client.send(request, UpdateFeaturesResponse, version)
    per_feature = {r.feature: (r.error_code, r.error_message) for r in response.results}
    failures = 0
    for name, level, kind in updates:
        code, message = per_feature.get(name, (response.error_code, response.error_message))
        if response.error_code != ErrorCode.NONE:
            code, message = response.error_code, response.error_message
        if level == 0 and kind != UPGRADE:
            attempt, done = f"disable {name}", "disabled"
        else:
            target = level_name(name, level)
            attempt, done = f"{OPERATIONS[kind]} {name} to {target}", f"{OPERATIONS[kind]}d to {target}"
        if code != ErrorCode.NONE:
            failures += 1
            reason = message or ErrorCode.for_code(code).description
            print(f"Could not {attempt}. {reason}", file=out)
        elif dry_run:
            print(f"{name} can be {done}.", file=out)
        else:
            print(f"{name} was {done}.", file=out)
    if failures:
        raise ToolError(f"{failures} out of {len(updates)} operation(s) failed.")
    return 0
