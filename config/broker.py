"""The broker's configuration: ``server.properties`` plus ``--override`` items, validated.

:func:`build_config` parses every setting of the catalog, checks the settings that
tie one to another as Kafka's ``KafkaConfig`` does, and fills :class:`BrokerConfig`
in one pass over the catalog: each setting becomes the attribute of its name with
dots as underscores (settings without an attribute are read with
:meth:`BrokerConfig.get`), and the few values Kafka derives from several settings
replace theirs.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from config.catalog import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    UNIMPLEMENTED_KAFKA_CONFIGS,
    is_known_unimplemented,
    jaas_config_key,
    listener_override,
)
from config.catalog.group import CONSUMER_GROUP_ASSIGNOR_CLASSES
from config.listeners import (
    HostPort,
    Listener,
    QuorumVoter,
    SecurityProtocol,
    check_roles,
    csv,
    parse_host_port,
    parse_voters,
    require,
    resolve_network,
)
from config.properties import parse_overrides, read_properties_file
from config.synonyms import broker_synonyms, dynamic_log_layers
from config.topic import TopicConfig
from config.types import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigValue,
    TypedValues,
    format_value,
)

_MS_PER_MINUTE: Final = 60_000
_MS_PER_HOUR: Final = 3_600_000


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's validated configuration.

    Attributes are the Kafka settings with dots as underscores, filled from the
    catalog by :func:`build_config` (a setting read only by name, such as the TLS
    ones, has no attribute: :meth:`get` reads it). A few hold the effective value Kafka derives rather than the setting itself: ``node_id``
    (node.id or broker.id), ``log_dirs`` (log.dirs or log.dir),
    ``log_retention_ms`` (ms, else minutes, else hours; any negative value is -1),
    ``log_roll_ms``/``log_roll_jitter_ms`` (ms, else hours), ``log_flush_interval_ms``
    (else log.flush.scheduler.interval.ms), ``advertised_listeners`` (else listeners,
    without controller listeners) and ``inter_broker_listener_name``. :meth:`get`
    returns any supported setting by its Kafka name as configured, for DescribeConfigs.
    """

    node_id: int
    process_roles: tuple[str, ...]
    controller_quorum_voters: tuple[QuorumVoter, ...]
    controller_listener_names: tuple[str, ...]
    cluster_id: str | None
    broker_rack: str | None
    broker_session_timeout_ms: int
    broker_heartbeat_interval_ms: int
    initial_broker_registration_timeout_ms: int

    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    listener_security_protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    socket_request_max_bytes: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_listen_backlog_size: int
    connections_max_idle_ms: int
    queued_max_request_bytes: int
    socket_request_read_timeout_ms: int
    queued_max_requests: int
    num_network_threads: int
    num_io_threads: int
    max_connections: int
    max_connections_per_ip: int
    fetch_max_bytes: int
    max_incremental_fetch_session_cache_slots: int

    log_dirs: tuple[Path, ...]
    num_partitions: int
    auto_create_topics_enable: bool
    default_replication_factor: int
    min_insync_replicas: int
    message_max_bytes: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_jitter_ms: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_segment_delete_delay_ms: int
    log_cleanup_policy: tuple[str, ...]
    log_message_timestamp_type: str
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_message_timestamp_difference_max_ms: int
    log_message_format_version: str
    log_message_downconversion_enable: bool
    log_preallocate: bool
    log_local_retention_ms: int
    log_local_retention_bytes: int
    num_recovery_threads_per_data_dir: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    delete_topic_enable: bool
    quota_window_num: int
    quota_window_size_seconds: int
    controller_quota_window_num: int
    controller_quota_window_size_seconds: int
    max_connections_per_ip_overrides: str
    max_connection_creation_rate: int
    authorizer_audit_log_file: str
    authorizer_audit_log_max_bytes: int
    authorizer_audit_log_backup_count: int
    authorizer_class_name: str
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    unclean_leader_election_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int

    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_open_files_max: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_delete_retention_ms: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int

    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_min_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int

    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offsets_commit_timeout_ms: int
    offset_metadata_max_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int

    group_consumer_session_timeout_ms: int
    group_consumer_min_session_timeout_ms: int
    group_consumer_max_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_consumer_min_heartbeat_interval_ms: int
    group_consumer_max_heartbeat_interval_ms: int
    group_consumer_max_size: int
    #: by name (uniform, range), in the configured order
    group_consumer_assignors: tuple[str, ...]
    group_consumer_migration_policy: str

    group_share_session_timeout_ms: int
    group_share_min_session_timeout_ms: int
    group_share_max_session_timeout_ms: int
    group_share_heartbeat_interval_ms: int
    group_share_min_heartbeat_interval_ms: int
    group_share_max_heartbeat_interval_ms: int
    group_share_record_lock_duration_ms: int
    group_share_min_record_lock_duration_ms: int
    group_share_max_record_lock_duration_ms: int
    group_share_delivery_count_limit: int
    group_share_min_delivery_count_limit: int
    group_share_max_delivery_count_limit: int
    group_share_partition_max_record_locks: int
    group_share_min_partition_max_record_locks: int
    group_share_max_partition_max_record_locks: int
    group_share_max_size: int
    errors_deadletterqueue_topic_name_prefix: str
    errors_deadletterqueue_auto_create_topics_enable: bool
    share_coordinator_state_topic_num_partitions: int
    share_coordinator_state_topic_replication_factor: int
    share_coordinator_state_topic_min_isr: int
    share_coordinator_state_topic_segment_bytes: int

    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int

    metrics_listener: HostPort | None
    log_format: str
    metrics_enabled: bool
    telemetry_max_bytes: int
    max_partitions_per_request: int
    max_partitions_per_broker: int
    event_loop_slow_step_ms: int
    event_loop_stall_abort_ms: int
    event_loop_full_collection_interval_ms: int
    tracing_sampling_ratio: float

    raw: Mapping[str, str] = field(hash=False)
    """Every key given (file then overrides), with its original string."""
    values: Mapping[str, ConfigValue] = field(hash=False, repr=False)
    """Typed value of every supported setting, explicit or default."""

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def get(self, key: str) -> ConfigValue:
        """The typed value of a supported setting by its Kafka name; KeyError if unsupported."""
        if key not in BROKER_CONFIGS:
            raise KeyError(key)
        return self.values[key]

    def for_listener(self, listener: str, key: str) -> ConfigValue:
        """A security setting as the listener sees it: ``listener.name.<listener>.<key>`` over ``key``."""
        override = self.raw.get(f"listener.name.{listener.lower()}.{key}")
        return self.get(key) if override is None else BROKER_CONFIGS[key].parse(override)

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's brokers read it."""
        return self.raw.get(jaas_config_key(listener, mechanism))

    def is_set(self, key: str) -> bool:
        """Whether the setting was given (in the file or an override) rather than defaulted."""
        if key in ("node.id", "broker.id"):
            # Kafka copies whichever of the two is given into the other.
            return "node.id" in self.raw or "broker.id" in self.raw
        return key in self.raw

    def source(self, key: str) -> ConfigSource:
        """Where the reported value of a supported setting comes from."""
        return self.describe_entry(key).source

    def static_value(self, key: str) -> str | None:
        """A supported setting's value as configured, or as derived from its synonym
        (node.id and broker.id, as Kafka's populateSynonyms) or its default."""
        config_key = BROKER_CONFIGS[key]
        if key in self.raw:
            return self.raw[key]
        return format_value(config_key.type, self.values[key])

    def synonyms(self, key: str) -> list[ConfigSynonym]:
        """The settings behind ``key``'s reported value, as DescribeConfigs lists them.

        As Kafka's ConfigHelper: settings given explicitly, then defaults, each in
        synonym order, dropping the entries that come before ``key`` itself.
        """
        names = broker_synonyms(key)
        found: list[ConfigSynonym] = []
        for name in names:
            if self.is_set(name):
                found.append(
                    ConfigSynonym(name, self.static_value(name), ConfigSource.STATIC_BROKER_CONFIG)
                )
        for name in names:
            default = format_value(BROKER_CONFIGS[name].type, BROKER_CONFIGS[name].default_value)
            if default is not None:
                found.append(ConfigSynonym(name, default, ConfigSource.DEFAULT_CONFIG))
        while found and found[0].name != key:
            found.pop(0)
        if BROKER_CONFIGS[key].is_sensitive:
            found = [ConfigSynonym(s.name, None, s.source) for s in found]
        return found

    def describe_entry(self, key: str) -> ConfigEntry:
        """A supported setting as DescribeConfigs reports it for this broker."""
        config_key = BROKER_CONFIGS[key]
        synonyms = self.synonyms(key)
        return ConfigEntry(
            name=key,
            value=None if config_key.is_sensitive else self.static_value(key),
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            is_sensitive=config_key.is_sensitive,
            read_only=config_key.read_only,
            type=config_key.type,
            documentation=config_key.doc,
            synonyms=tuple(synonyms),
        )

    def describe(self, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries for ``keys`` (default: every supported setting)."""
        return [self.describe_entry(key) for key in (BROKER_CONFIGS if keys is None else keys)]

    def with_dynamic(
        self, dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str]
    ) -> BrokerConfig:
        """This configuration with the dynamic log settings in force.

        Key by key, per-broker beats cluster default beats static; values are then
        derived as at start-up, so a static ``log.retention.ms`` still beats a dynamic
        ``log.retention.hours``, as in Kafka. Raises ConfigError if the result is
        invalid, topic defaults included. Returns ``self`` when no dynamic log setting
        is set.
        """
        per_broker, default = dynamic_log_layers(dynamic_broker, dynamic_default)
        if not per_broker and not default:
            return self
        config, _ = build_config({**self.raw, **default, **per_broker})
        TopicConfig.resolve(config.topic_defaults(), {})  # topic defaults that contradict each other
        return config

    def topic_defaults(self) -> dict[str, ConfigValue]:
        """The default of every topic setting on this broker, as Kafka's
        ``KafkaConfig.extractLogConfigMap``: the broker setting it is a synonym of (its
        derived value for retention, roll, jitter and flush), else the topic's own default."""
        derived: dict[str, ConfigValue] = {
            "log.retention.ms": self.log_retention_ms,
            "log.roll.ms": self.log_roll_ms,
            "log.roll.jitter.ms": self.log_roll_jitter_ms,
            "log.flush.interval.ms": self.log_flush_interval_ms,
        }
        defaults: dict[str, ConfigValue] = {}
        for name, topic_key in TOPIC_CONFIGS.items():
            synonym = topic_key.broker_synonym
            if synonym is None:
                defaults[name] = topic_key.default_value
            else:
                defaults[name] = derived[synonym] if synonym in derived else self.values[synonym]
        return defaults


def broker_synonym_chain(
    config: BrokerConfig,
    key: str,
    dynamic_broker: Mapping[str, str],
    dynamic_default: Mapping[str, str],
) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms for a broker setting.

    Each layer in precedence order (dynamic per-broker, dynamic cluster default,
    static, default), each listing the synonyms that are set; then everything
    before ``key`` itself is dropped (a synonym of higher precedence that is set
    is reported on its own entry).
    """
    names = broker_synonyms(key) if key in BROKER_CONFIGS else (key,)
    chain: list[ConfigSynonym] = []
    for layer, source in ((dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        chain.extend(ConfigSynonym(n, layer[n], source) for n in names if n in layer)
    chain.extend(
        ConfigSynonym(n, config.static_value(n), ConfigSource.STATIC_BROKER_CONFIG) for n in names if config.is_set(n)
    )
    for n in names:
        spec = BROKER_CONFIGS.get(n)
        if spec is not None:
            default = format_value(spec.type, spec.default_value)
            if default is not None:
                chain.append(ConfigSynonym(n, default, ConfigSource.DEFAULT_CONFIG))
    while chain and chain[0].name != key:
        chain.pop(0)
    return chain


#: Catalog setting -> BrokerConfig attribute, for the settings that have one.
_ATTRIBUTES: Final[Mapping[str, str]] = {
    name: name.replace(".", "_")
    for name in BROKER_CONFIGS
    if name.replace(".", "_") in {f.name for f in dataclasses.fields(BrokerConfig)}
}


def _close_match(key: str) -> str | None:
    known = [*BROKER_CONFIGS, *UNIMPLEMENTED_KAFKA_CONFIGS]
    matches = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_key_error(key: str) -> ConfigError:
    suggestion = _close_match(key)
    message = f"Unknown configuration '{key}'"
    if suggestion is not None:
        message += f"; did you mean '{suggestion}'?"
    elif key in TOPIC_CONFIGS:
        message += "; it is a topic setting (set it on the topic, or use its log.* broker default)"
    return ConfigError(key, message)


def _check_limits(raw: Mapping[str, str], values: TypedValues) -> None:
    # Kafka's checks that tie one setting to another.
    session_ms = values.int_of("group.consumer.session.timeout.ms")
    heartbeat_ms = values.int_of("group.consumer.heartbeat.interval.ms")
    for key, value, low, high in (
        ("group.consumer.session.timeout.ms", session_ms, "group.consumer.min.session.timeout.ms",
         "group.consumer.max.session.timeout.ms"),
        ("group.consumer.heartbeat.interval.ms", heartbeat_ms, "group.consumer.min.heartbeat.interval.ms",
         "group.consumer.max.heartbeat.interval.ms"),
    ):
        require(values.int_of(low) <= value, key, f"{key} must be greater than or equal to {low}")
        require(value <= values.int_of(high), key, f"{key} must be less than or equal to {high}")
    require(heartbeat_ms < session_ms, "group.consumer.heartbeat.interval.ms",
             "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
    require(bool(values.list_of("group.consumer.assignors")), "group.consumer.assignors",
             "group.consumer.assignors must contain at least one assignor")
    cleaner_threads = values.int_of("log.cleaner.threads")
    require(
        cleaner_threads == 0
        or values.int_of("log.cleaner.dedupe.buffer.size") // cleaner_threads > 1024 * 1024,
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.",
    )
    fetch_wait_ms = values.int_of("replica.fetch.wait.max.ms")
    require(
        fetch_wait_ms <= values.int_of("replica.socket.timeout.ms"),
        "replica.socket.timeout.ms",
        "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent "
        "unnecessary socket timeouts",
    )
    require(
        fetch_wait_ms <= values.int_of("replica.lag.time.max.ms"),
        "replica.fetch.wait.max.ms",
        "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms to "
        "prevent frequent changes in ISR",
    )
    require(
        values.int_of("max.connections.per.ip") != 0
        or bool(raw.get("max.connections.per.ip.overrides", "").strip()),
        "max.connections.per.ip",
        "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.",
    )


def build_config(raw: Mapping[str, str]) -> tuple[BrokerConfig, list[str]]:
    """Validate ``raw`` settings (already merged) into a BrokerConfig, plus warnings."""
    warnings: list[str] = []
    for key in raw:
        if key in BROKER_CONFIGS:
            continue
        override = listener_override(key)
        if override is not None:
            if override[1] in BROKER_CONFIGS:
                BROKER_CONFIGS[override[1]].parse(raw[key])
            continue
        if is_known_unimplemented(key):
            warnings.append(
                f"Kafka setting '{key}' is accepted but not implemented by Cormorant; it has no effect"
            )
            continue
        raise _unknown_key_error(key)

    parsed: dict[str, ConfigValue] = {}
    for name, config_key in BROKER_CONFIGS.items():
        parsed[name] = config_key.parse(raw[name] if name in raw else config_key.default)

    # node.id and broker.id name the same thing; Kafka copies the one given into the other.
    if "node.id" not in raw and "broker.id" in raw:
        parsed["node.id"] = parsed["broker.id"]
    elif "broker.id" in raw and parsed["broker.id"] != parsed["node.id"]:
        raise ConfigError("node.id", "You must set `node.id` to the same value as `broker.id`.")
    parsed["broker.id"] = parsed["node.id"]
    values = TypedValues(parsed)
    node_id = values.int_of("node.id")
    require(
        node_id >= 0,
        "node.id",
        f"Invalid value {node_id} for configuration node.id: must be at least 0",
    )

    process_roles = values.list_of("process.roles")
    require(
        bool(process_roles),
        "process.roles",
        "process.roles must name broker, controller or both; Cormorant has no ZooKeeper mode",
    )
    require(
        len(set(process_roles)) == len(process_roles),
        "process.roles",
        f"Duplicate role names found in process.roles: {','.join(process_roles)}",
    )

    voters = parse_voters(values.list_of("controller.quorum.voters"))
    controller_names = tuple(
        name.upper() for name in csv(values.opt_str_of("controller.listener.names"))
    )
    network = resolve_network(raw, values, controller_names)
    check_roles(process_roles, node_id, voters, controller_names, network)

    log_dirs_text = values.opt_str_of("log.dirs")
    log_dirs = tuple(
        Path(item)
        for item in csv(log_dirs_text if log_dirs_text is not None else values.str_of("log.dir"))
    )
    require(
        bool(log_dirs),
        "log.dirs",
        "At least one log directory must be defined via log.dirs or log.dir.",
    )

    retention_key, retention_ms = _retention_ms(values)
    require(
        retention_ms >= 1 or retention_ms == -1,
        retention_key,
        "log.retention.ms must be unlimited (-1) or, greater than or equal to 1",
    )
    roll_ms = _ms_or_hours(values, "log.roll.ms", "log.roll.hours")
    require(roll_ms >= 1, "log.roll.ms", "log.roll.ms must be greater than or equal to 1")
    roll_jitter_ms = _ms_or_hours(values, "log.roll.jitter.ms", "log.roll.jitter.hours")
    require(
        roll_jitter_ms >= 0,
        "log.roll.jitter.ms",
        "log.roll.jitter.ms must be greater than or equal to 0",
    )
    flush_interval_ms = values.opt_int_of("log.flush.interval.ms")
    if flush_interval_ms is None:
        flush_interval_ms = values.int_of("log.flush.scheduler.interval.ms")
    _check_limits(raw, values)

    attributes: dict[str, Any] = {
        attribute: parsed[name] for name, attribute in _ATTRIBUTES.items() if name in parsed
    }
    # The values Kafka derives from several settings, under the derived setting's name.
    attributes.update(
        node_id=node_id,
        controller_quorum_voters=voters,
        controller_listener_names=controller_names,
        listeners=network.listeners,
        advertised_listeners=network.advertised_listeners,
        listener_security_protocol_map=MappingProxyType(network.protocols),
        inter_broker_listener_name=network.inter_broker_listener_name,
        log_dirs=log_dirs,
        log_retention_ms=retention_ms,
        log_roll_ms=roll_ms,
        log_roll_jitter_ms=roll_jitter_ms,
        log_flush_interval_ms=flush_interval_ms,
        super_users=frozenset(
            p.strip() for p in (values.opt_str_of("super.users") or "").split(";") if p.strip()
        ),
        group_consumer_assignors=tuple(dict.fromkeys(
            CONSUMER_GROUP_ASSIGNOR_CLASSES.get(a, a) for a in values.list_of("group.consumer.assignors")
        )),
        metrics_listener=parse_host_port("metrics.listener", values.str_of("metrics.listener")),
    )
    config = BrokerConfig(**attributes, raw=MappingProxyType(dict(raw)), values=MappingProxyType(parsed))
    return config, warnings


def _retention_ms(values: TypedValues) -> tuple[str, int]:
    # Kafka: log.retention.ms beats log.retention.minutes beats log.retention.hours;
    # any negative result means unlimited (-1). Also returns the key that decided.
    millis = values.opt_int_of("log.retention.ms")
    key = "log.retention.ms"
    if millis is None:
        minutes = values.opt_int_of("log.retention.minutes")
        if minutes is not None:
            millis, key = minutes * _MS_PER_MINUTE, "log.retention.minutes"
        else:
            millis, key = values.int_of("log.retention.hours") * _MS_PER_HOUR, "log.retention.hours"
    return key, -1 if millis < 0 else millis


def _ms_or_hours(values: TypedValues, ms_key: str, hours_key: str) -> int:
    millis = values.opt_int_of(ms_key)
    return millis if millis is not None else values.int_of(hours_key) * _MS_PER_HOUR


def load_config(
    properties_path: Path | None, overrides: list[str]
) -> tuple[BrokerConfig, list[str]]:
    """Read ``properties_path`` (if any), apply ``--override key=value`` items on top, validate.

    Returns the configuration and one warning per accepted-but-unimplemented Kafka
    setting. Raises ConfigError for an unknown key, a bad value or an inconsistent
    combination, and OSError if the file cannot be read.
    """
    raw: dict[str, str] = {}
    if properties_path is not None:
        raw.update(read_properties_file(properties_path))
    raw.update(parse_overrides(overrides))
    return build_config(raw)


def default_config() -> BrokerConfig:
    """The configuration with every setting at its default."""
    return build_config({})[0]

