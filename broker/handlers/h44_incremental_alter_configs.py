"""IncrementalAlterConfigs (44), v0-1: change topic, broker and logger configs key by key.

Operations (KIP-339): SET (0), DELETE (1), and for list settings APPEND (2) and
SUBTRACT (3), which start from the current value or the setting's default.
Checks follow Kafka's broker pre-processing (ConfigAdminManager) and then its
controller (ConfigurationControlManager), in that order:

* a resource named twice: INVALID_REQUEST for each copy; a key named twice in
  one resource, or a null value for anything but DELETE: INVALID_REQUEST;
* TOPIC (2): the resulting configs must be valid (INVALID_CONFIG, with Kafka's
  message) and the topic must exist (UNKNOWN_TOPIC_OR_PARTITION); APPEND or
  SUBTRACT on a non-list setting is INVALID_CONFIG;
* BROKER (4): "" for the cluster default or this broker's id (else
  INVALID_REQUEST); only dynamically updatable settings may change, per-broker
  ones only with a broker id, and values must parse (else INVALID_REQUEST, as
  Kafka answers); names Cormorant does not know are stored as given, as Kafka
  stores custom settings;
* BROKER_LOGGER (8): sets or clears this process's logger levels (log4j names);
* GROUP (32): the group configs of config/group.py (INVALID_CONFIG for another name,
  a bad value, or APPEND/SUBTRACT), written by the controller as ConfigRecords that
  every broker reads; a group need not exist (a name is INVALID_REQUEST only if empty);
* CLIENT_METRICS (16): a client metrics subscription (config/client_metrics.py: ``metrics``,
  ``interval.ms``, ``match``; INVALID_REQUEST for an unknown key or an interval out of
  bounds, INVALID_CONFIG for a value that does not parse or a bad match item; APPEND and
  SUBTRACT on ``metrics`` and ``match``), written by the controller like group configs;
  deleting every key removes the subscription;
* any other type: INVALID_REQUEST.

``validate_only`` runs every check and changes nothing. Accepted changes are
written by the controller; live partitions pick up topic changes when the new
metadata image is applied. Results come in request order. v1 is flexible.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from broker.handlers.h32_describe_configs import (
    BROKER,
    BROKER_LOGGER,
    CLIENT_METRICS,
    GROUP,
    ROOT_LOGGER,
    TOPIC,
)
from broker.security.acl_operations import config_resource_denied
from broker.security.keystore_reload import check_listener_update, listener_keys_of
from broker.server.dispatch import RequestContext
from config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigKey,
    ConfigType,
    UpdateMode,
    client_metrics,
)
from config import group as group_configs
from wire.errors import ErrorCode
from wire.generated.api_044_incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IncrementalAlterConfigsResponseAlterConfigsResourceResponse,
)

if TYPE_CHECKING:
    from broker.server.services import BrokerServices

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

log = structlog.get_logger(__name__)

SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

#: log4j level names Kafka accepts for BROKER_LOGGER, and the Python levels they set.
LOG_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


class AlterError(Exception):
    """A resource whose change is refused, answered with ``code`` and ``message``."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    operation: int
    value: str | None


def _scala_set(names: Sequence[str]) -> str:
    return "Set(" + ", ".join(names) + ")"


def check_keys(ops: Sequence[Op]) -> None:
    """Duplicate keys and null values, as Kafka's broker pre-processing refuses them."""
    counts = Counter(op.name for op in ops)
    if any(n > 1 for n in counts.values()):
        raise AlterError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [op.name for op in ops if op.operation != DELETE and op.value is None]
    if nulls:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def check_broker_name(node_id: int, name: str) -> None:
    """A broker resource is "" (cluster default) or this broker's own id."""
    if not name:
        return
    try:
        broker_id = int(name.strip())
    except ValueError:
        raise AlterError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        raise AlterError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")


def validate_broker_configs(configs: Mapping[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validate: what may change at runtime, and whether values parse."""
    fixed = sorted(k for k in configs if k in BROKER_CONFIGS and BROKER_CONFIGS[k].read_only)
    if fixed:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: " + _scala_set(fixed))
    for key, value in configs.items():
        spec = BROKER_CONFIGS.get(key)
        if spec is not None:
            try:
                spec.parse(value)
            except ConfigError as ex:
                raise AlterError(ErrorCode.INVALID_REQUEST, str(ex)) from None
    if not per_broker:
        only_per_broker = sorted(
            k for k in configs if k in BROKER_CONFIGS and BROKER_CONFIGS[k].update_mode is UpdateMode.PER_BROKER
        )
        if only_per_broker:
            raise AlterError(
                ErrorCode.INVALID_REQUEST,
                "Cannot update these configs at default cluster level, broker id must be specified: "
                + _scala_set(only_per_broker),
            )


def check_dynamic_result(services: BrokerServices, name: str, configs: Mapping[str, str]) -> None:
    """The broker configuration with ``configs`` as broker ``name``'s dynamic settings ("" for
    the cluster default) must still be valid as a whole, as Kafka checks a dynamic update
    by building the new configuration."""
    image = services.image
    if name:
        per_broker, default = configs, image.broker_config("")
    else:
        per_broker, default = image.broker_config(services.node_id), configs
    try:
        services.config.with_dynamic(per_broker, default)
    except ConfigError as ex:
        raise AlterError(ErrorCode.INVALID_REQUEST, str(ex)) from None


def encrypted_passwords(services: BrokerServices, name: str, changes: Mapping[str, str | None]) -> dict[str, str | None]:
    """``changes`` as stored: password-type values encrypted with ``password.encoder.secret``,
    refused without it or at the cluster-default level (Kafka's DynamicBrokerConfig)."""
    try:
        return services.dynamic_passwords.encode_changes(changes, per_broker=bool(name))
    except ConfigError as ex:
        raise AlterError(ErrorCode.INVALID_REQUEST,
                         f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): {ex}") from None


def _list_parts(value: str | None) -> list[str]:
    return [] if not value else [part for part in value.split(",") if part]


def _java_split(value: str) -> list[str]:
    # Java's String.split drops trailing empty strings.
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def apply_ops(
    current: Mapping[str, str],
    ops: Sequence[Op],
    catalog: Mapping[str, ConfigKey],
    list_error: Callable[[Op], str],
    unknown_error: Callable[[Op], str] | None = None,
) -> dict[str, str | None]:
    """The new value of each key the ops touch (None: deleted), from ``current``.

    ``list_error`` words the refusal of APPEND/SUBTRACT on a non-list setting and
    ``unknown_error`` (if given) on an unknown one: Kafka's broker and controller
    word them differently.
    """
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.operation == SET:
            changes[op.name] = op.value
        elif op.operation == DELETE:
            changes[op.name] = None
        elif op.operation in (APPEND, SUBTRACT):
            spec = catalog.get(op.name)
            if spec is None and unknown_error is not None:
                raise AlterError(ErrorCode.INVALID_CONFIG, unknown_error(op))
            if spec is None or spec.type is not ConfigType.LIST:
                raise AlterError(ErrorCode.INVALID_CONFIG, list_error(op))
            existing = current.get(op.name)
            parts = _list_parts(existing if existing is not None else spec.default)
            given = _java_split(op.value or "")
            if op.operation == APPEND:
                parts.extend(v for v in dict.fromkeys(given) if v not in parts)
            else:
                for v in given:
                    if v in parts:
                        parts.remove(v)
            changes[op.name] = ",".join(parts)
        else:
            raise AlterError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.operation}")
    return changes


def merged(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


async def write_changes(
    ctx: RequestContext,
    resource_type: int,
    name: str,
    changes: Mapping[str, str | None],
    replace_all: bool,
    validate_only: bool,
) -> None:
    code, message = await ctx.services.controller.alter_configs(resource_type, name, dict(changes), replace_all, validate_only)
    if code != ErrorCode.NONE:
        raise AlterError(code, message)
    if not validate_only:
        log.info("configs_altered", resource_type=resource_type, resource_name=name,
                 keys=sorted(changes), replace_all=replace_all)


def duplicate_resources(resources: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
    counts = Counter(resources)
    return {r for r, n in counts.items() if n > 1}


async def handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    response = IncrementalAlterConfigsResponse()
    duplicates = duplicate_resources([(r.resource_type, r.resource_name) for r in request.resources])
    for resource in request.resources:
        out = IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None
        )
        response.responses.append(out)
        try:
            if (resource.resource_type, resource.resource_name) in duplicates:
                raise AlterError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            denied = config_resource_denied(ctx, resource.resource_type, resource.resource_name, alter=True)
            if denied is not None:
                raise AlterError(denied, None)
            ops = [Op(c.name, c.config_operation, c.value) for c in resource.configs]
            check_keys(ops)
            await _alter(ctx, resource.resource_type, resource.resource_name, ops, request.validate_only)
        except AlterError as ex:
            out.error_code = ex.code
            out.error_message = ex.message
            ctx.services.log_client_error("alter_configs_rejected", resource_type=resource.resource_type,
                                          resource_name=resource.resource_name, error=ex.code.name,
                                          reason=ex.message, client_id=ctx.client_id)
    return response


def check_listener_stores(services: BrokerServices, name: str, current: Mapping[str, str], resulting: Mapping[str, str]) -> None:
    """Listener TLS stores are per broker and must load, as Kafka's dynamic listener update."""
    touched = listener_keys_of(k for k in set(current) | set(resulting) if current.get(k) != resulting.get(k))
    if not touched:
        return
    if not name:
        raise AlterError(ErrorCode.INVALID_REQUEST,
                         "Cannot update these configs at default cluster level, broker id must be specified: "
                         + _scala_set(touched))
    try:
        check_listener_update(services.config, current, resulting)
    except (ConfigError, OSError, ValueError) as ex:
        raise AlterError(ErrorCode.INVALID_REQUEST, f"Validation of dynamic config update of SSLFactory failed: {ex}") from None


async def _alter(ctx: RequestContext, resource_type: int, name: str, ops: list[Op], validate_only: bool) -> None:
    services = ctx.services
    if resource_type == BROKER_LOGGER:
        alter_loggers(services.node_id, name, ops, validate_only)
        return
    if resource_type == BROKER:
        check_broker_name(services.node_id, name)
        current = services.dynamic_passwords.decoded(services.image.broker_config(name))
        changes = apply_ops(
            current, ops, BROKER_CONFIGS,
            lambda op: f"Config value {OP_NAMES[op.operation].lower()} is not allowed for config key: {op.name}",
            lambda op: f"Unknown config name: {op.name}",
        )
        validate_broker_configs(merged(current, changes), per_broker=bool(name))
        check_dynamic_result(services, name, merged(current, changes))
        check_listener_stores(services, name, current, merged(current, changes))
        await write_changes(ctx, BROKER, name, encrypted_passwords(services, name, changes), False, validate_only)
        return
    if resource_type == TOPIC:
        current = dict(services.image.topic_config(name))
        changes = apply_ops(
            current, ops, TOPIC_CONFIGS,
            lambda op: f"Can't {OP_NAMES[op.operation]} to key {op.name} because its type is not LIST.",
        )
        # The controller checks the name, the resulting settings and then the topic's existence.
        await write_changes(ctx, TOPIC, name, changes, False, validate_only)
        return
    if resource_type == GROUP:
        await _alter_group(ctx, name, ops, validate_only)
        return
    if resource_type == CLIENT_METRICS:
        await _alter_client_metrics(ctx, name, ops, validate_only)
        return
    raise AlterError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource_type}")


def check_group_configs(ctx: RequestContext, name: str, configs: Mapping[str, str]) -> None:
    """A group resource is named; its resulting configs are group configs with valid values."""
    if not name:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    problem = group_configs.error(configs, group_configs.bounds_from(ctx.services.config))
    if problem is not None:
        raise AlterError(ErrorCode.INVALID_CONFIG, problem)


async def _alter_group(ctx: RequestContext, name: str, ops: list[Op], validate_only: bool) -> None:
    current = dict(ctx.services.image.group_config(name))
    changes = apply_ops(current, ops, {},
                        lambda op: f"Can't {OP_NAMES[op.operation]} to key {op.name} because its type is not LIST.")
    check_group_configs(ctx, name, merged(current, changes))
    await write_changes(ctx, GROUP, name, changes, False, validate_only)


def check_client_metrics(name: str, configs: Mapping[str, str]) -> None:
    """A subscription's resulting configs, as Kafka's ClientMetricsConfigs.validate."""
    try:
        client_metrics.validate(name, configs)
    except client_metrics.ClientMetricsConfigError as ex:
        raise AlterError(ErrorCode.INVALID_REQUEST if ex.invalid_request else ErrorCode.INVALID_CONFIG,
                         str(ex)) from None


async def _alter_client_metrics(ctx: RequestContext, name: str, ops: list[Op], validate_only: bool) -> None:
    current = dict(ctx.services.image.configs.get((CLIENT_METRICS, name), {}))
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.operation in (APPEND, SUBTRACT) and op.name not in client_metrics.LIST_NAMES:
            raise AlterError(ErrorCode.INVALID_CONFIG,
                             f"Can't {OP_NAMES[op.operation]} to key {op.name} because its type is not LIST.")
        if op.operation in (APPEND, SUBTRACT):
            existing = current.get(op.name)
            parts = client_metrics.parse_list(existing) if existing is not None else []
            given = _java_split(op.value or "")
            if op.operation == APPEND:
                parts.extend(v for v in dict.fromkeys(given) if v not in parts)
            else:
                parts = [v for v in parts if v not in given]
            changes[op.name] = ",".join(parts)
        else:
            changes.update(apply_ops(current, [op], {}, lambda o: ""))
    check_client_metrics(name, merged(current, changes))
    await write_changes(ctx, CLIENT_METRICS, name, changes, False, validate_only)


def _logger_exists(name: str) -> bool:
    if name == ROOT_LOGGER:
        return True
    return isinstance(logging.root.manager.loggerDict.get(name), logging.Logger)


def alter_loggers(node_id: int, name: str, ops: Sequence[Op], validate_only: bool) -> None:
    """Kafka's RuntimeLoggerManager: validate every operation, then apply them all."""
    try:
        broker_id = int(name.strip())
    except ValueError:
        raise AlterError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        raise AlterError(ErrorCode.INVALID_REQUEST, f"Unexpected node id. Expected {node_id}, but received {name}")
    for op in ops:
        if op.operation == SET:
            if not _logger_exists(op.name):
                raise AlterError(ErrorCode.INVALID_CONFIG, f"Logger {op.name} does not exist!")
            if op.value not in LOG_LEVELS:
                raise AlterError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {op.name} to {op.value} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(sorted(LOG_LEVELS))}",
                )
        elif op.operation == DELETE:
            if not _logger_exists(op.name):
                raise AlterError(ErrorCode.INVALID_CONFIG, f"Logger {op.name} does not exist!")
            if op.name == ROOT_LOGGER:
                raise AlterError(ErrorCode.INVALID_REQUEST,
                                 f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
        elif op.operation in (APPEND, SUBTRACT):
            raise AlterError(ErrorCode.INVALID_REQUEST,
                             f"{OP_NAMES[op.operation]} operation is not allowed for the BROKER_LOGGER resource")
        else:
            raise AlterError(ErrorCode.INVALID_REQUEST,
                             f"Unknown operation type {op.operation} is not allowed for the BROKER_LOGGER resource")
    if validate_only:
        return
    for op in ops:
        logger = logging.getLogger() if op.name == ROOT_LOGGER else logging.getLogger(op.name)
        if op.operation == SET:
            assert op.value is not None
            logger.setLevel(LOG_LEVELS[op.value])
            log.warning("log_level_updated", logger=op.name, level=op.value)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("log_level_unset", logger=op.name)
