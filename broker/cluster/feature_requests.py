"""UpdateFeatures (57) requests and answers shared by the broker and controller listeners,
and its forwarding from a broker-only node to the active controller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from broker.cluster.controller_channel import ControllerChannel
from controller.features import FEATURES, SAFE_DOWNGRADE, UPGRADE, FeatureUpdate, finalized
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_018_api_versions import (
    ApiVersionsResponse,
    ApiVersionsResponseFinalizedFeatureKey,
    ApiVersionsResponseSupportedFeatureKey,
)
from wire.generated.api_057_update_features import (
    UpdateFeaturesRequest,
    UpdateFeaturesRequestFeatureUpdateKey,
    UpdateFeaturesResponse,
    UpdateFeaturesResponseUpdatableFeatureResult,
)

#: What this software supports: the same for every ApiVersions.
_SUPPORTED_FEATURES = tuple(
    ApiVersionsResponseSupportedFeatureKey(name=f.name, min_version=f.min_level, max_version=f.max_level)
    for f in sorted(FEATURES.values(), key=lambda f: f.name)
)


def add_features(response: ApiVersionsResponse, image: MetadataImage) -> None:
    """ApiVersions v3+: the levels this software supports, the finalized ones and their epoch
    (the metadata offset, which only grows)."""
    response.supported_features = list(_SUPPORTED_FEATURES)
    response.finalized_features_epoch = image.offset
    response.finalized_features = [
        ApiVersionsResponseFinalizedFeatureKey(name=name, max_version_level=lvl, min_version_level=lvl)
        for name, lvl in finalized(image.features).items()
    ]


WaitForImage = Callable[[Callable[[MetadataImage], bool], float], Awaitable[object]]


def updates_of(request: UpdateFeaturesRequest, api_version: int) -> list[FeatureUpdate]:
    """v0 says AllowDowngrade; v1+ an upgrade type (1 upgrade, 2 safe, 3 unsafe downgrade)."""
    return [FeatureUpdate(u.feature, u.max_version_level,
                          u.upgrade_type if api_version >= 1 else (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE))
            for u in request.feature_updates]


def response_of(request: UpdateFeaturesRequest, api_version: int, error: ErrorCode,
                message: str | None) -> UpdateFeaturesResponse:
    """v0-1 also give a result per feature (all the same: the update is all or nothing); v2
    only the top-level error."""
    response = UpdateFeaturesResponse(error_code=error, error_message=message)
    if api_version <= 1:
        response.results = [UpdateFeaturesResponseUpdatableFeatureResult(feature=u.feature, error_code=error,
                                                                         error_message=message)
                            for u in request.feature_updates]
    return response


async def forward_update_features(
    channel: ControllerChannel, timeout_s: float, wait_for_image: WaitForImage, wait_s: float,
    updates: Sequence[FeatureUpdate], validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """UpdateFeatures at the active controller; returns once this broker's image shows the levels."""
    request = UpdateFeaturesRequest(
        timeout_ms=int(timeout_s * 1000), validate_only=validate_only,
        feature_updates=[UpdateFeaturesRequestFeatureUpdateKey(
            # v1+ (whichever the controller settles on) says the upgrade type; v0's AllowDowngrade
            # is not in them.
            feature=u.feature, max_version_level=u.max_version_level, upgrade_type=u.upgrade_type)
            for u in updates])
    reply = await channel.send_to_active(request, UpdateFeaturesResponse, timeout_s=timeout_s,
                                         not_controller=lambda r: r.error_code == ErrorCode.NOT_CONTROLLER)
    error = ErrorCode.for_code(reply.error_code)
    if error is ErrorCode.NONE and not validate_only:
        def shown(image: MetadataImage) -> bool:
            return all(image.features.get(u.feature, 0) == u.max_version_level for u in updates)

        await wait_for_image(shown, wait_s)
    return error, reply.error_message
