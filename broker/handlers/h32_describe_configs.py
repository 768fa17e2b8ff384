"""DescribeConfigs (32), v0-4: topic, broker and logger configs with their sources.

Mirrors Kafka's ConfigHelper. Resources:

* TOPIC (2): every topic setting with its effective value; the source is
  DYNAMIC_TOPIC_CONFIG for the topic's own overrides, else that of the broker
  setting it defaults from (STATIC_BROKER_CONFIG or DEFAULT_CONFIG). An invalid
  name is INVALID_TOPIC_EXCEPTION, an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
* BROKER (4): named by this broker's id — every setting with its value, layered
  as Kafka does: dynamic per-broker, dynamic cluster default, static, default;
  "" — the dynamic cluster defaults only. Another id or a non-number is
  INVALID_REQUEST.
* BROKER_LOGGER (8): this broker's loggers and their levels (log4j names).
* CLIENT_METRICS (16): the subscription's stored settings.
* GROUP (32): the group configs (config/group.py) from the metadata image, the same at
  every broker: set ones as GROUP_CONFIG (8), the others at the broker setting they
  override (``group.share.*``, with its source and synonyms) or at their defaults.

Any other resource type fails the whole request with INVALID_REQUEST, as in
Kafka. ``configuration_keys`` (null or empty for all) filters by name. Sensitive
settings (passwords, and unknown keys, as Kafka treats them) have a null value.

Versions: v0 has no sources, only ``is_default``; v1+ add config_source and,
with ``include_synonyms``, the synonyms that decide the value in precedence
order; v3+ add config_type and, with ``include_documentation``, the
documentation (else null); v4 is flexible.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import structlog

from broker.security.acl_operations import config_resource_denied
from broker.server.dispatch import RequestContext
from config import (
    BROKER_CONFIGS,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    broker_synonym_chain,
)
from config import group as group_configs
from controller.service import validate_topic_name
from wire.errors import ErrorCode
from wire.generated.api_032_describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseDescribeConfigsResourceResult,
    DescribeConfigsResponseDescribeConfigsResult,
    DescribeConfigsResponseDescribeConfigsSynonym,
)

API_KEY = 32
MIN_VERSION = 0
MAX_VERSION = 4

log = structlog.get_logger(__name__)

# ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
KNOWN_RESOURCE_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)

ROOT_LOGGER = "root"
#: The loggers reported besides root: this program's own packages.
OWN_LOGGERS = ("broker", "controller", "wire")
#: Kafka's default message for INVALID_REQUEST, sent when the whole request is refused.
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or the message "
    "was sent to an incompatible broker. See the broker logs for more details."
)


class ResourceError(Exception):
    """A resource that cannot be described, answered with ``code`` and ``message``."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


async def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    response = DescribeConfigsResponse()
    pacer = ctx.pacer
    if any(r.resource_type not in KNOWN_RESOURCE_TYPES for r in request.resources):
        # Kafka rejects the whole request when one resource has an unknown type.
        for r in request.resources:
            response.results.append(DescribeConfigsResponseDescribeConfigsResult(
                error_code=ErrorCode.INVALID_REQUEST, error_message=INVALID_REQUEST_MESSAGE,
                resource_type=r.resource_type, resource_name=r.resource_name))
            if pacer.tick():
                await pacer.pause()
        return response
    for resource in request.resources:
        if pacer.tick():
            await pacer.pause()
        result = DescribeConfigsResponseDescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        denied = config_resource_denied(ctx, resource.resource_type, resource.resource_name, alter=False)
        if denied is not None:
            result.error_code, result.error_message = denied, None
            response.results.append(result)
            continue
        try:
            entries = _describe(ctx, resource)
        except ResourceError as ex:
            result.error_code = ex.code
            result.error_message = ex.message
            ctx.services.log_client_error("describe_configs_failed", resource_type=resource.resource_type,
                                          resource_name=resource.resource_name, error=ex.code.name,
                                          reason=ex.message, client_id=ctx.client_id)
        else:
            wanted = resource.configuration_keys
            if wanted:
                entries = [e for e in entries if e.name in wanted]
            result.configs = [_entry(ctx, request, resource.resource_type, e) for e in entries]
            # Its return value matters: the countdown crosses zero here far more often than in
            # the per-resource tick above.
            if pacer.tick(len(entries)):
                await pacer.pause()
        response.results.append(result)
    return response


def _describe(ctx: RequestContext, resource: DescribeConfigsRequestDescribeConfigsResource) -> list[ConfigEntry]:
    services = ctx.services
    image = services.image
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        problem = validate_topic_name(name)
        if problem is not None:
            raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if image.topic(name) is None:
            # Kafka leaves the message at its empty default here.
            raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
        try:
            return services.topic_configs.describe(image.topic_config(name))
        except ConfigError as ex:
            log.error("topic_config_invalid", topic=name, key=ex.key, error=str(ex))
            raise ResourceError(ErrorCode.UNKNOWN_SERVER_ERROR, None) from ex
    if resource.resource_type == BROKER:
        if not name:
            return dynamic_default_entries(services.config, image.broker_config(""))
        if broker_id_of(name, "Broker id must be an integer, but it is: ") != services.node_id:
            raise ResourceError(ErrorCode.INVALID_REQUEST,
                                f"Unexpected broker id, expected {services.node_id} or empty string, but received {name}")
        return broker_entries(services.config, image.broker_config(services.node_id), image.broker_config(""))
    if resource.resource_type == BROKER_LOGGER:
        if not name:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        if broker_id_of(name, "Broker id must be an integer, but it is: ") != services.node_id:
            raise ResourceError(ErrorCode.INVALID_REQUEST,
                                f"Unexpected broker id, expected {services.node_id} but received {name}")
        return logger_entries()
    if resource.resource_type == GROUP:
        return share_group_entries(ctx, name)
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
    return [
        ConfigEntry(key, value, ConfigSource.CLIENT_METRICS_CONFIG, False, False, ConfigType.UNKNOWN, "", ())
        for key, value in sorted(image.configs.get((CLIENT_METRICS, name), {}).items())
    ]


def share_group_entries(ctx: RequestContext, group_id: str) -> list[ConfigEntry]:
    """Kafka's ConfigHelper for a group: every group config, the group's own value first in
    its synonyms, then the broker setting it overrides."""
    if not group_id:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    services = ctx.services
    image = services.image
    own = image.group_config(group_id)
    out = []
    for key in group_configs.GROUP_CONFIG_NAMES:
        synonym = group_configs.BROKER_SYNONYMS.get(key)
        chain = [] if synonym is None else broker_synonym_chain(
            services.config, synonym, image.broker_config(services.node_id), image.broker_config(""))
        if key in own:
            chain.insert(0, ConfigSynonym(key, own[key], ConfigSource.GROUP_CONFIG))
        value = chain[0].value if chain else group_configs.DEFAULTS.get(key)
        out.append(ConfigEntry(key, value, chain[0].source if chain else ConfigSource.DEFAULT_CONFIG, False, False,
                               group_configs.TYPES[key], group_configs.DOCS[key], tuple(chain)))
    return out


def broker_id_of(name: str, message: str) -> int:
    try:
        return int(name.strip())
    except ValueError:
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"{message}{name}") from None


def _entry(
    ctx: RequestContext, request: DescribeConfigsRequest, resource_type: int, entry: ConfigEntry
) -> DescribeConfigsResponseDescribeConfigsResourceResult:
    version = ctx.api_version
    out = DescribeConfigsResponseDescribeConfigsResourceResult(
        name=entry.name,
        value=None if entry.is_sensitive else entry.value,
        read_only=entry.read_only,
        is_sensitive=entry.is_sensitive,
    )
    if version == 0:
        out.is_default = entry.source == ConfigSource.DEFAULT_CONFIG
        return out
    out.config_source = entry.source
    if request.include_synonyms:
        out.synonyms = [
            DescribeConfigsResponseDescribeConfigsSynonym(
                name=s.name, value=None if entry.is_sensitive else s.value, source=s.source
            )
            for s in entry.synonyms
        ]
    if version >= 3 and resource_type in (TOPIC, BROKER):
        # Logger and client-metrics entries keep the schema defaults, as Kafka's do.
        out.config_type = entry.type
        out.documentation = entry.documentation if request.include_documentation else None
    return out


# ------------------------------------------------------------ broker configs


def _broker_entry(
    config: BrokerConfig,
    key: str,
    dynamic_broker: Mapping[str, str],
    dynamic_default: Mapping[str, str],
    cluster_default_only: bool,
) -> ConfigEntry:
    spec = BROKER_CONFIGS.get(key)
    # Kafka treats a setting of unknown type as possibly secret.
    sensitive = spec is None or spec.is_sensitive
    chain = broker_synonym_chain(config, key, dynamic_broker, dynamic_default)
    if cluster_default_only:
        chain = [s for s in chain if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        value: str | None = dynamic_default.get(key)
    elif key in dynamic_broker:
        value = dynamic_broker[key]
    elif key in dynamic_default:
        value = dynamic_default[key]
    elif spec is not None:
        value = config.describe_entry(key).value
    else:
        value = config.raw.get(key)
    if sensitive:
        chain = [ConfigSynonym(s.name, None, s.source) for s in chain]
    return ConfigEntry(
        name=key,
        value=None if sensitive else value,
        source=chain[0].source if chain else ConfigSource.DEFAULT_CONFIG,
        is_sensitive=sensitive,
        read_only=spec is None or spec.read_only,
        type=ConfigType.UNKNOWN if spec is None else spec.type,
        documentation="" if spec is None else spec.doc,
        synonyms=tuple(chain),
    )


def broker_entries(
    config: BrokerConfig, dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str]
) -> list[ConfigEntry]:
    """This broker's settings: every supported one, plus any other key given statically or dynamically."""
    keys: list[str] = list(BROKER_CONFIGS)
    extra = (set(config.raw) | set(dynamic_broker) | set(dynamic_default)) - set(BROKER_CONFIGS)
    keys.extend(sorted(extra))
    return [_broker_entry(config, k, dynamic_broker, dynamic_default, False) for k in keys]


def dynamic_default_entries(config: BrokerConfig, dynamic_default: Mapping[str, str]) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (broker resource ""), as Kafka lists them."""
    return [_broker_entry(config, k, {}, dynamic_default, True) for k in sorted(dynamic_default)]


# ------------------------------------------------------------ loggers

_LOG4J_LEVELS = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARN",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}


def log4j_level(level: int) -> str:
    """A Python logging level by the log4j name Kafka's tools expect."""
    if level <= 5:
        return "TRACE"
    for threshold in sorted(_LOG4J_LEVELS, reverse=True):
        if level >= threshold:
            return _LOG4J_LEVELS[threshold]
    return "DEBUG"


def existing_loggers() -> Iterable[str]:
    """Root, then this program's loggers that exist (Kafka lists only existing loggers)."""
    yield ROOT_LOGGER
    known = logging.root.manager.loggerDict
    for name in sorted(known):
        if isinstance(known[name], logging.Logger) and name.split(".")[0] in OWN_LOGGERS:
            yield name


def logger_entries() -> list[ConfigEntry]:
    out = []
    for name in existing_loggers():
        logger = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
        out.append(ConfigEntry(name, log4j_level(logger.getEffectiveLevel()),
                               ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, False, ConfigType.UNKNOWN, "", ()))
    return out
