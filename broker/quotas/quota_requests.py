"""AlterClientQuotas entries to and from :mod:`controller.quotas`, and their forwarding from
a broker to the active controller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

if TYPE_CHECKING:
    from broker.cluster.controller_channel import ControllerChannel

WaitForImage = Callable[[Callable[[MetadataImage], bool], float], Awaitable[bool]]
QuotaChange = tuple[Sequence[tuple[str, str | None]], Mapping[str, float | None]]


def change_of(entry: AlterClientQuotasRequestEntryData) -> QuotaChange | str:
    """An entry as (entity pairs, {key: value or None to remove}); a duplicate key is Kafka's refusal."""
    ops: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in ops:
            return f"Duplicate quota key {op.key} not updating quota for entity {entry.entity}"
        ops[op.key] = None if op.remove else op.value
    return [(e.entity_type, e.entity_name) for e in entry.entity], ops


def changes_of(
    entries: Sequence[AlterClientQuotasRequestEntryData],
) -> tuple[dict[int, tuple[ErrorCode, str | None]], list[tuple[int, QuotaChange]]]:
    """The request's entries split by index: refusals (INVALID_REQUEST) and changes to make."""
    refused: dict[int, tuple[ErrorCode, str | None]] = {}
    changes: list[tuple[int, QuotaChange]] = []
    for i, entry in enumerate(entries):
        change = change_of(entry)
        if isinstance(change, str):
            refused[i] = (ErrorCode.INVALID_REQUEST, change)
        else:
            changes.append((i, change))
    return refused, changes


def entry_of(change: QuotaChange) -> AlterClientQuotasRequestEntryData:
    pairs, ops = change
    return AlterClientQuotasRequestEntryData(
        entity=[AlterClientQuotasRequestEntityData(entity_type=t, entity_name=n) for t, n in pairs],
        ops=[AlterClientQuotasRequestOpData(key=k, value=0.0 if v is None else v, remove=v is None)
             for k, v in ops.items()])


async def forward_alter_client_quotas(
    channel: ControllerChannel, timeout_s: float, wait_for_image: WaitForImage, wait_s: float,
    changes: Sequence[QuotaChange], validate_only: bool,
) -> list[tuple[ErrorCode, str | None]]:
    """AlterClientQuotas at the active controller; returns once this broker's image shows the changes."""
    reply = await channel.send_to_active(
        AlterClientQuotasRequest(entries=[entry_of(c) for c in changes], validate_only=validate_only),
        AlterClientQuotasResponse, timeout_s=timeout_s,
        not_controller=lambda r: any(e.error_code == ErrorCode.NOT_CONTROLLER for e in r.entries))
    out = [(ErrorCode.for_code(e.error_code), e.error_message) for e in reply.entries]
    done = [c for c, (code, _) in zip(changes, out, strict=False) if code == ErrorCode.NONE]
    if done and not validate_only:
        def shown(image: MetadataImage) -> bool:
            for pairs, ops in done:
                current = image.client_quotas.get(tuple(sorted(pairs)), {})
                if any(current.get(k) != v for k, v in ops.items()):
                    return False
            return True

        await wait_for_image(shown, wait_s)
    return out
