"""Broker and topic configuration: Kafka 3.9 names, defaults, parsing and validation."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from config import (
    BROKER_CONFIGS,
    DOUBLE_MAX,
    LONG_MAX,
    TOPIC_CONFIGS,
    UNIMPLEMENTED_KAFKA_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    HostPort,
    Listener,
    Password,
    QuorumVoter,
    SecurityProtocol,
    TopicConfig,
    build_config,
    default_config,
    format_value,
    load_config,
    parse_overrides,
    parse_properties,
    render_configuration_markdown,
    validate_topic_overrides,
)

ROOT = Path(__file__).resolve().parents[2]


def config(**settings: str) -> BrokerConfig:
    """A config from keyword settings, with '_' standing for '.' in the key."""
    cfg, _ = build_config({key.replace("_", "."): value for key, value in settings.items()})
    return cfg


def raw_config(settings: Mapping[str, str]) -> tuple[BrokerConfig, list[str]]:
    return build_config(dict(settings))


# --- defaults ---------------------------------------------------------------------------------

# Kafka 3.9's documented defaults, written as Kafka prints them.
KAFKA_DEFAULTS: dict[str, str | None] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "log.retention.hours": "168",
    "log.retention.minutes": None,
    "log.retention.ms": None,
    "log.retention.bytes": "-1",
    "log.segment.bytes": "1073741824",
    "log.roll.hours": "168",
    "log.roll.ms": None,
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.flush.interval.messages": str(LONG_MAX),
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": str(LONG_MAX),
    "log.retention.check.interval.ms": "300000",
    "log.segment.delete.delay.ms": "60000",
    "log.cleanup.policy": "delete",
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": str(LONG_MAX),
    "log.message.timestamp.after.max.ms": str(LONG_MAX),
    "message.max.bytes": "1048588",
    "replica.fetch.max.bytes": "1048576",
    "socket.request.max.bytes": "104857600",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "connections.max.idle.ms": "600000",
    "queued.max.requests": "500",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.retention.minutes": "10080",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "transaction.state.log.num.partitions": "50",
    "transactional.id.expiration.ms": "604800000",
    "producer.id.expiration.ms": "86400000",
    "transaction.max.timeout.ms": "900000",
    "broker.rack": None,
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "30000",
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    "delete.topic.enable": "true",
    "compression.type": "producer",
    "log.cleaner.enable": "true",
    "log.cleaner.threads": "1",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
    "auto.leader.rebalance.enable": "true",
    "advertised.listeners": None,
    "inter.broker.listener.name": None,
    "controller.listener.names": None,
    "listener.security.protocol.map": (
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
    ),
}


@pytest.mark.parametrize(("key", "kafka_default"), sorted(KAFKA_DEFAULTS.items()))
def test_defaults_equal_kafkas(key: str, kafka_default: str | None) -> None:
    config_key = BROKER_CONFIGS[key]
    assert config_key.kafka_default is None, (
        "sample keys must be ones where Cormorant keeps Kafka's default"
    )
    assert format_value(config_key.type, default_config().get(key)) == kafka_default
    assert default_config().source(key) is ConfigSource.DEFAULT_CONFIG


def test_cormorant_specific_defaults() -> None:
    cfg = default_config()
    assert cfg.node_id == 1
    assert cfg.process_roles == ("broker", "controller")
    assert cfg.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092, SecurityProtocol.PLAINTEXT),)
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.log_dirs == (Path("./cormorant-data"),)
    assert cfg.metrics_listener == HostPort("127.0.0.1", 9464)
    assert cfg.cluster_id is None
    assert cfg.log_format == "console"
    # Where Cormorant differs from Kafka the catalog records Kafka's default.
    assert BROKER_CONFIGS["node.id"].kafka_default == "-1"
    assert BROKER_CONFIGS["listeners"].kafka_default == "PLAINTEXT://:9092"
    assert BROKER_CONFIGS["log.dir"].kafka_default == "/tmp/kafka-logs"


def test_effective_defaults() -> None:
    cfg = default_config()
    assert cfg.log_retention_ms == 168 * 3_600_000
    assert cfg.log_roll_ms == 168 * 3_600_000
    assert cfg.log_roll_jitter_ms == 0
    assert cfg.log_flush_interval_ms == LONG_MAX
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.controller_quorum_voters == ()
    assert cfg.is_broker and cfg.is_controller
    assert cfg.offsets_topic_replication_factor == 3


def test_every_simple_setting_has_a_matching_attribute() -> None:
    cfg = default_config()
    folded = {
        # Settings folded into a derived attribute, or parsed into a richer one.
        "broker.id", "log.dir", "log.dirs", "log.retention.hours", "log.retention.minutes",
        "log.retention.ms", "log.roll.hours", "log.roll.ms", "log.roll.jitter.hours",
        "log.roll.jitter.ms", "log.flush.interval.ms", "security.inter.broker.protocol",
        "inter.broker.listener.name", "listeners", "advertised.listeners",
        "listener.security.protocol.map", "controller.quorum.voters",
        "controller.listener.names", "metrics.listener", "super.users",
    }  # fmt: skip
    field_names = {f.name for f in dataclasses.fields(BrokerConfig)}
    for key in BROKER_CONFIGS:
        attribute = key.replace(".", "_")
        if key in folded or BROKER_CONFIGS[key].group == "Security":
            # Security settings are per listener: BrokerConfig.for_listener reads them.
            continue
        assert attribute in field_names, key
        assert getattr(cfg, attribute) == cfg.get(key), key
    # And no attribute is left without a setting behind it.
    known = {key.replace(".", "_") for key in BROKER_CONFIGS} | {"raw", "values"}
    assert field_names <= known


def test_catalog_invariants() -> None:
    for catalog in (BROKER_CONFIGS, TOPIC_CONFIGS):
        for name, config_key in catalog.items():
            assert config_key.name == name
            assert config_key.doc.strip()
            # Every default parses and passes its own validator.
            assert config_key.default_value is not None or config_key.default is None
    assert not set(BROKER_CONFIGS) & UNIMPLEMENTED_KAFKA_CONFIGS
    for config_key in TOPIC_CONFIGS.values():
        if config_key.broker_synonym is not None:
            broker_key = BROKER_CONFIGS[config_key.broker_synonym]
            assert broker_key.type is config_key.type, config_key.name


# --- properties files -------------------------------------------------------------------------


def test_properties_separators_and_comments() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   # indented comment\n"
        "\n"
        "a=1\n"
        "b = 2\n"
        "c:3\n"
        "d : 4\n"
        "e 5\n"
        "f\t\t6\n"
        "   g=7\n"
        "h==8\n"
        "i=value with spaces  \n"
        "j\n"
        "k=\n"
        "l = x=y:z\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "7",
        "h": "=8",
        "i": "value with spaces  ",
        "j": "",
        "k": "",
        "l": "x=y:z",
    }


def test_properties_line_continuations() -> None:
    text = (
        "listeners=PLAINTEXT://:9092,\\\n"
        "          CONTROLLER://:9093\n"
        "a=one\\\n"
        "# not a comment here\n"
        "b=two\\\\\n"
        "c=three\n"
        "# a comment ending in a backslash does not continue \\\n"
        "d=four\n"
        "e=five\\\n"
        "\n"
        "f=six\n"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "a": "one# not a comment here",
        "b": "two\\",
        "c": "three",
        "d": "four",
        "e": "five",
        "f": "six",
    }


def test_properties_escapes() -> None:
    text = (
        "key\\=with\\:seps\\ and\\ spaces=v\n"
        "tab=a\\tb\n"
        "newline=a\\nb\n"
        "unicode=\\u00e9t\\u00E9\n"
        "other=\\q\\#\\!\n"
        "path=C:\\\\data\n"
    )
    assert parse_properties(text) == {
        "key=with:seps and spaces": "v",
        "tab": "a\tb",
        "newline": "a\nb",
        "unicode": "été",
        "other": "q#!",
        "path": "C:\\data",
    }


def test_properties_line_endings_and_duplicates() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\na=4") == {"a": "4", "b": "2", "c": "3"}


def test_properties_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError):
        parse_properties("a=\\u12g4\n")


def _escape_properties(text: str, is_key: bool) -> str:
    # As java.util.Properties.store, without the \uXXXX step (files here are UTF-8).
    out = []
    for index, char in enumerate(text):
        if char == " " and (is_key or index == 0):
            out.append("\\ ")
        elif char in "\\=:#!":
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        else:
            out.append(char)
    return "".join(out)


# Surrogates cannot be written; the other characters are line breaks to str.splitlines
# but not to a properties file, and are left out so the escaper need not know them.
_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x0b\x1c\x1d\x1e\x85\u2028\u2029")
)


@given(st.dictionaries(_text.filter(bool), _text, max_size=8))
def test_properties_round_trip(entries: dict[str, str]) -> None:
    text = "".join(
        f"{_escape_properties(key, True)}={_escape_properties(value, False)}\n"
        for key, value in entries.items()
    )
    assert parse_properties(text) == entries


def test_load_config_reads_file_and_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.retention.hours=24\nbroker.rack=r1\n", encoding="utf-8")
    cfg, warnings = load_config(path, ["num.partitions=6", "log.segment.bytes=1048576"])
    assert warnings == []
    assert cfg.num_partitions == 6
    assert cfg.log_retention_ms == 24 * 3_600_000
    assert cfg.log_segment_bytes == 1048576
    assert cfg.broker_rack == "r1"
    assert cfg.raw["num.partitions"] == "6"
    assert cfg.source("num.partitions") is ConfigSource.STATIC_BROKER_CONFIG


def test_load_config_without_a_file() -> None:
    cfg, warnings = load_config(None, [])
    assert warnings == []
    assert cfg == default_config()


def test_load_config_utf8_and_latin1_files(tmp_path: Path) -> None:
    utf8 = tmp_path / "utf8.properties"
    utf8.write_bytes("broker.rack=zürich\n".encode())
    assert load_config(utf8, [])[0].broker_rack == "zürich"
    latin1 = tmp_path / "latin1.properties"
    latin1.write_bytes("broker.rack=z\xfcrich\n".encode("iso-8859-1"))
    assert load_config(latin1, [])[0].broker_rack == "zürich"


def test_override_syntax() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c=", "d"]) == {"a": "1", "b": "x=y", "c": "", "d": ""}
    with pytest.raises(ConfigError):
        parse_overrides(["=1"])


def test_later_override_wins() -> None:
    cfg, _ = load_config(None, ["num.partitions=2", "num.partitions=5"])
    assert cfg.num_partitions == 5


def test_kafka_style_combined_mode_file_loads(tmp_path: Path) -> None:
    # The shape of Kafka's own KRaft example configuration.
    path = tmp_path / "server.properties"
    path.write_text(
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.voters=1@localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "num.network.threads=3\n"
        "num.io.threads=8\n"
        "socket.send.buffer.bytes=102400\n"
        "socket.receive.buffer.bytes=102400\n"
        "socket.request.max.bytes=104857600\n"
        "log.dirs=/var/lib/kraft-combined-logs\n"
        "num.partitions=1\n"
        "num.recovery.threads.per.data.dir=1\n"
        "offsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
        "log.retention.hours=168\n"
        "log.segment.bytes=1073741824\n"
        "log.retention.check.interval.ms=300000\n",
        encoding="utf-8",
    )
    cfg, warnings = load_config(path, [])
    assert warnings == []
    assert cfg.controller_quorum_voters == (QuorumVoter(1, "localhost", 9093),)
    assert [str(listener) for listener in cfg.listeners] == [
        "PLAINTEXT://:9092",
        "CONTROLLER://:9093",
    ]
    # Controller listeners are not advertised to clients.
    assert [str(listener) for listener in cfg.advertised_listeners] == [
        "PLAINTEXT://localhost:9092"
    ]
    assert cfg.controller_listener_names == ("CONTROLLER",)
    assert cfg.log_dirs == (Path("/var/lib/kraft-combined-logs"),)
    assert cfg.offsets_topic_replication_factor == 1


# --- errors and warnings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "abc"),
        ("num.partitions", "0"),
        ("num.partitions", "1.5"),
        ("num.partitions", "5_000"),
        ("message.max.bytes", "2147483648"),
        ("offsets.topic.replication.factor", "32768"),
        ("auto.create.topics.enable", "yes"),
        ("log.segment.bytes", "13"),
        ("log.cleanup.policy", "delete,foo"),
        ("log.message.timestamp.type", "createtime"),
        ("compression.type", "brotli"),
        ("compression.gzip.level", "0"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.min.cleanable.ratio", "half"),
        ("process.roles", "broker,zookeeper"),
        ("log.message.format.version", "9.9"),
        ("metrics.listener", "localhost"),
        ("cluster.id", "not-a-uuid"),
        ("log.format", "xml"),
        ("node.id", "-1"),
        ("controller.quorum.voters", "1@localhost"),
    ],
)
def test_bad_value_names_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        raw_config({key: value})
    assert caught.value.key == key
    assert key in str(caught.value)


def test_value_error_uses_kafkas_wording() -> None:
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "Invalid value 0 for configuration num.partitions: Value must be at least 1"
        ),
    ):
        raw_config({"num.partitions": "0"})


def test_typo_names_the_closest_key() -> None:
    with pytest.raises(ConfigError) as caught:
        raw_config({"log.retention.hour": "24"})
    assert caught.value.key == "log.retention.hour"
    assert "log.retention.hours" in str(caught.value)


def test_unknown_key_without_a_close_match() -> None:
    with pytest.raises(ConfigError, match="Unknown configuration 'zzz'"):
        raw_config({"zzz": "1"})


def test_known_but_unimplemented_setting_warns_once() -> None:
    cfg, warnings = raw_config(
        {"background.threads": "4", "ssl.engine.factory.class": "x.Y", "num.partitions": "2"}
    )
    assert cfg.num_partitions == 2
    assert len(warnings) == 2
    assert sum("background.threads" in warning for warning in warnings) == 1
    assert sum("ssl.engine.factory.class" in warning for warning in warnings) == 1
    assert cfg.raw["background.threads"] == "4"


def test_listener_overrides_of_security_settings() -> None:
    cfg, warnings = raw_config({
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": "x required;",
        "listener.name.sasl_ssl.num.partitions": "3",
    })
    assert cfg.for_listener("MTLS", "ssl.client.auth") == "required"
    assert cfg.for_listener("SSL", "ssl.client.auth") == "requested"
    assert cfg.jaas_config("SASL_SSL", "PLAIN") == "x required;"
    # Only security settings are applied per listener; others warn as unimplemented.
    assert len(warnings) == 1 and "listener.name.sasl_ssl.num.partitions" in warnings[0]
    with pytest.raises(ConfigError, match=r"ssl\.client\.auth"):
        raw_config({"listener.name.mtls.ssl.client.auth": "always"})


def test_listener_prefixed_settings_are_accepted_with_a_warning() -> None:
    _, warnings = raw_config({"listener.name.sasl_ssl.ssl.engine.factory.class": "x.Y"})
    assert len(warnings) == 1
    assert "listener.name.sasl_ssl.ssl.engine.factory.class" in warnings[0]


def test_values_are_trimmed_as_kafka_does() -> None:
    cfg = config(num_partitions="  4 ", auto_create_topics_enable=" FALSE")
    assert cfg.num_partitions == 4
    assert cfg.auto_create_topics_enable is False


# --- derived values ---------------------------------------------------------------------------


def test_retention_hours_only() -> None:
    assert config(log_retention_hours="24").log_retention_ms == 24 * 3_600_000


def test_retention_minutes_beat_hours() -> None:
    cfg = config(log_retention_hours="24", log_retention_minutes="30")
    assert cfg.log_retention_ms == 30 * 60_000


def test_retention_ms_beats_minutes_and_hours() -> None:
    cfg = config(log_retention_hours="24", log_retention_minutes="30", log_retention_ms="1234")
    assert cfg.log_retention_ms == 1234


@pytest.mark.parametrize("value", ["-1", "-5"])
def test_negative_retention_means_unlimited(value: str) -> None:
    assert config(log_retention_ms=value).log_retention_ms == -1


@pytest.mark.parametrize(
    "key", ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
)
def test_zero_retention_is_rejected(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        raw_config({key: "0"})
    assert caught.value.key == key


def test_roll_and_flush_fallbacks() -> None:
    cfg = config(
        log_roll_hours="2", log_roll_jitter_hours="1", log_flush_scheduler_interval_ms="5000"
    )
    assert cfg.log_roll_ms == 2 * 3_600_000
    assert cfg.log_roll_jitter_ms == 3_600_000
    assert cfg.log_flush_interval_ms == 5000
    cfg = config(log_roll_hours="2", log_roll_ms="1000", log_flush_interval_ms="10")
    assert cfg.log_roll_ms == 1000
    assert cfg.log_flush_interval_ms == 10


def test_log_dirs_fall_back_to_log_dir() -> None:
    assert config(log_dir="/data/one").log_dirs == (Path("/data/one"),)
    assert config(log_dir="/x", log_dirs="/a, /b").log_dirs == (Path("/a"), Path("/b"))
    with pytest.raises(ConfigError, match="At least one log directory"):
        config(log_dirs=" ")


def test_broker_id_and_node_id() -> None:
    assert config(broker_id="7").node_id == 7
    assert config(node_id="7").get("broker.id") == 7
    assert config(node_id="7", broker_id="7").node_id == 7
    with pytest.raises(ConfigError, match="same value"):
        config(node_id="7", broker_id="8")


# --- listeners --------------------------------------------------------------------------------


def test_listener_parsing() -> None:
    cfg = config(listeners="PLAINTEXT://0.0.0.0:9092, ssl://[::1]:9093,INTERNAL://host.example:0",
                 listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:PLAINTEXT",
                 advertised_listeners="PLAINTEXT://broker.example:9092")  # fmt: skip
    assert cfg.listeners == (
        Listener("PLAINTEXT", "0.0.0.0", 9092, SecurityProtocol.PLAINTEXT),
        Listener("SSL", "::1", 9093, SecurityProtocol.SSL),
        Listener("INTERNAL", "host.example", 0, SecurityProtocol.PLAINTEXT),
    )
    assert str(cfg.listeners[1]) == "SSL://[::1]:9093"
    assert cfg.advertised_listeners == (
        Listener("PLAINTEXT", "broker.example", 9092, SecurityProtocol.PLAINTEXT),
    )


def test_empty_host_binds_every_interface() -> None:
    (listener,) = config(listeners="PLAINTEXT://:9092").listeners
    assert listener.host == ""
    assert listener.port == 9092


def test_port_zero_may_repeat() -> None:
    cfg = config(
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        advertised_listeners="PLAINTEXT://127.0.0.1:0",
    )
    assert [listener.port for listener in cfg.listeners] == [0, 0]


def test_ipv4_and_ipv6_may_share_a_port() -> None:
    cfg = config(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092",
        advertised_listeners="PLAINTEXT://127.0.0.1:9092",
    )
    assert len(cfg.listeners) == 2


@pytest.mark.parametrize(
    "listeners",
    [
        "PLAINTEXT://:9092,SSL://:9092",  # same port
        "PLAINTEXT://:9092,PLAINTEXT://:9093",  # same name
        "PLAINTEXT:9092",  # not a URI
        "PLAINTEXT://:99999",  # port out of range
        "FOO://:9092",  # no security protocol for FOO
        "://:9092",  # no name
    ],
)
def test_bad_listeners(listeners: str) -> None:
    with pytest.raises(ConfigError) as caught:
        raw_config({"listeners": listeners})
    assert caught.value.key == "listeners"


def test_advertised_listener_checks() -> None:
    with pytest.raises(ConfigError, match=re.escape("0.0.0.0")):
        config(
            listeners="PLAINTEXT://0.0.0.0:9092", advertised_listeners="PLAINTEXT://0.0.0.0:9092"
        )
    with pytest.raises(ConfigError, match="subset"):
        config(advertised_listeners="PLAINTEXT://a:9092,SSL://a:9093")
    with pytest.raises(ConfigError, match=re.escape("inter.broker.listener.name")):
        config(listeners="INTERNAL://:9092", listener_security_protocol_map="INTERNAL:PLAINTEXT")


def test_inter_broker_listener() -> None:
    cfg = config(listeners="INTERNAL://:9092,EXTERNAL://:9093", inter_broker_listener_name="internal",
                 listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SSL")  # fmt: skip
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.listener_security_protocol_map["EXTERNAL"] is SecurityProtocol.SSL
    cfg = config(listeners="SSL://:9093", security_inter_broker_protocol="SSL")
    assert cfg.inter_broker_listener_name == "SSL"
    with pytest.raises(ConfigError, match="Only one of"):
        config(inter_broker_listener_name="PLAINTEXT", security_inter_broker_protocol="PLAINTEXT")


def test_security_protocol_map_errors() -> None:
    with pytest.raises(ConfigError, match="Invalid security protocol"):
        config(listener_security_protocol_map="PLAINTEXT:TLS")
    with pytest.raises(ConfigError) as caught:
        config(listener_security_protocol_map="PLAINTEXT")
    assert caught.value.key == "listener.security.protocol.map"


def test_controller_listener_maps_to_plaintext_when_the_map_is_unset() -> None:
    cfg = config(
        listeners="PLAINTEXT://:9092,CONTROLLER://:9093", controller_listener_names="CONTROLLER"
    )
    assert cfg.listener_security_protocol_map["CONTROLLER"] is SecurityProtocol.PLAINTEXT
    assert [listener.name for listener in cfg.advertised_listeners] == ["PLAINTEXT"]
    # An explicit map must name the controller listener itself.
    with pytest.raises(ConfigError, match="CONTROLLER"):
        config(listeners="PLAINTEXT://:9092,CONTROLLER://:9093", controller_listener_names="CONTROLLER",
               listener_security_protocol_map="PLAINTEXT:PLAINTEXT")  # fmt: skip


# --- roles and quorum -------------------------------------------------------------------------


def test_controller_only_node() -> None:
    cfg = config(process_roles="controller", listeners="CONTROLLER://:9093", controller_listener_names="CONTROLLER",
                 controller_quorum_voters="1@localhost:9093")  # fmt: skip
    assert not cfg.is_broker and cfg.is_controller
    with pytest.raises(ConfigError):
        config(process_roles="controller", listeners="PLAINTEXT://:9092")


def test_broker_only_node_needs_voters_and_a_controller_listener_name() -> None:
    cfg = config(process_roles="broker", node_id="2", controller_quorum_voters="1@ctl:9093",
                 controller_listener_names="CONTROLLER")  # fmt: skip
    assert cfg.is_broker and not cfg.is_controller
    with pytest.raises(ConfigError) as caught:
        config(process_roles="broker", controller_listener_names="CONTROLLER")
    assert caught.value.key == "controller.quorum.voters"
    with pytest.raises(ConfigError, match="must not be included"):
        config(process_roles="broker", node_id="1", controller_quorum_voters="1@ctl:9093",
               controller_listener_names="CONTROLLER")  # fmt: skip


def test_voters() -> None:
    cfg = config(controller_quorum_voters="1@a:9093, 2@[::1]:9093,3@c.example:9093")
    assert cfg.controller_quorum_voters == (
        QuorumVoter(1, "a", 9093), QuorumVoter(2, "::1", 9093), QuorumVoter(3, "c.example", 9093),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="node id 1 must be included"):
        config(controller_quorum_voters="2@a:9093")
    for bad in ("x@a:9093", "1@0.0.0.0:9093", "1@a:9093,1@b:9093", "1a:9093"):
        with pytest.raises(ConfigError):
            config(controller_quorum_voters=bad)


def test_process_roles_must_be_given_once() -> None:
    with pytest.raises(ConfigError, match="ZooKeeper"):
        config(process_roles="")
    with pytest.raises(ConfigError, match="Duplicate"):
        config(process_roles="broker,broker")


def test_cross_setting_checks() -> None:
    with pytest.raises(ConfigError, match="1MB per cleaner thread"):
        config(log_cleaner_dedupe_buffer_size="1048576")
    with pytest.raises(ConfigError):
        config(replica_fetch_wait_max_ms="40000")
    with pytest.raises(ConfigError):
        config(max_connections_per_ip="0")


def test_cormorant_settings() -> None:
    assert config(metrics_listener="").metrics_listener is None
    assert config(metrics_listener="0.0.0.0:0").metrics_listener == HostPort("0.0.0.0", 0)
    assert config(cluster_id="MkU3OEVBNTcwNTJENDM2Qg").cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert config(log_format="json").log_format == "json"


# --- typed values and DescribeConfigs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("config_type", "raw", "value"),
    [
        (ConfigType.INT, "+5", 5),
        (ConfigType.INT, "2147483647", 2147483647),
        (ConfigType.LONG, "-9223372036854775808", -(2**63)),
        (ConfigType.DOUBLE, "1e3", 1000.0),
        (ConfigType.DOUBLE, "0.5d", 0.5),
        (ConfigType.BOOLEAN, "True", True),
        (ConfigType.LIST, "a, b ,c", ("a", "b", "c")),
        (ConfigType.LIST, "  ", ()),
        (ConfigType.STRING, " x ", "x"),
    ],
)
def test_typed_parsing(config_type: ConfigType, raw: str, value: object) -> None:
    config_key = dataclasses.replace(BROKER_CONFIGS["broker.rack"], type=config_type)
    assert config_key.parse(raw) == value


@pytest.mark.parametrize(
    ("config_type", "value", "text"),
    [
        (ConfigType.DOUBLE, 0.5, "0.5"),
        (ConfigType.DOUBLE, 1.0, "1.0"),
        (ConfigType.DOUBLE, 1e7, "1.0E7"),
        (ConfigType.DOUBLE, 1.5e-5, "1.5E-5"),
        (ConfigType.DOUBLE, DOUBLE_MAX, "1.7976931348623157E308"),
        (ConfigType.BOOLEAN, False, "false"),
        (ConfigType.LIST, ("compact", "delete"), "compact,delete"),
        (ConfigType.LONG, LONG_MAX, "9223372036854775807"),
        (ConfigType.STRING, None, None),
    ],
)
def test_format_value_as_kafka(config_type: ConfigType, value: object, text: str | None) -> None:
    assert format_value(config_type, value) == text  # type: ignore[arg-type]


def test_passwords_never_show() -> None:
    assert repr(Password("secret")) == "[hidden]"
    assert "secret" not in str(Password("secret"))


def test_wire_numbering_of_types_and_sources() -> None:
    assert [int(t) for t in ConfigType] == list(range(10))
    assert (int(ConfigType.BOOLEAN), int(ConfigType.LIST), int(ConfigType.PASSWORD)) == (1, 7, 9)
    assert int(ConfigSource.DYNAMIC_TOPIC_CONFIG) == 1
    assert int(ConfigSource.DYNAMIC_BROKER_CONFIG) == 2
    assert int(ConfigSource.STATIC_BROKER_CONFIG) == 4
    assert int(ConfigSource.DEFAULT_CONFIG) == 5


def test_describe_broker_settings() -> None:
    cfg = config(num_partitions=" 3", log_retention_ms="1000")
    entry = cfg.describe_entry("num.partitions")
    assert entry.value == " 3"  # Kafka reports a given setting's original string
    assert entry.source is ConfigSource.STATIC_BROKER_CONFIG
    assert entry.type is ConfigType.INT
    assert entry.read_only is True
    assert entry.is_sensitive is False
    assert entry.documentation
    retention = cfg.describe_entry("log.retention.ms")
    assert retention.read_only is False  # cluster-wide in Kafka
    assert [s.name for s in retention.synonyms] == ["log.retention.ms", "log.retention.hours"]
    hours = cfg.describe_entry("log.retention.hours")
    assert hours.source is ConfigSource.DEFAULT_CONFIG
    assert hours.value == "168"
    assert default_config().describe_entry("log.retention.ms").value is None
    assert len(cfg.describe()) == len(BROKER_CONFIGS)
    with pytest.raises(KeyError):
        cfg.get("background.threads")


# --- topic settings ---------------------------------------------------------------------------


def test_topic_defaults_come_from_the_broker() -> None:
    broker = config(log_retention_hours="24", log_segment_bytes="1048576", log_cleanup_policy="compact",
                    message_max_bytes="2000000", min_insync_replicas="2", log_roll_ms="5000")  # fmt: skip
    topic = TopicConfig.resolve(broker.topic_defaults(), {})
    assert topic.retention_ms == 24 * 3_600_000
    assert topic.segment_bytes == 1048576
    assert topic.cleanup_policy == ("compact",)
    assert topic.max_message_bytes == 2000000
    assert topic.min_insync_replicas == 2
    assert topic.segment_ms == 5000
    assert topic.compact and not topic.delete
    assert topic.flush_ms == LONG_MAX
    assert topic.remote_storage_enable is False


def test_topic_overrides_win_and_report_their_source() -> None:
    broker = config(log_retention_ms="1000", log_segment_bytes="1048576")
    topic = TopicConfig.resolve(broker.topic_defaults(), {"retention.ms": "-1", "cleanup.policy": "compact,delete"})
    assert topic.retention_ms == -1
    assert topic.compact and topic.delete
    assert topic.source("retention.ms", broker.synonyms) is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert topic.source("segment.bytes", broker.synonyms) is ConfigSource.STATIC_BROKER_CONFIG
    assert topic.source("index.interval.bytes", broker.synonyms) is ConfigSource.DEFAULT_CONFIG
    assert topic.source("remote.storage.enable", broker.synonyms) is ConfigSource.DEFAULT_CONFIG
    entry = topic.describe_entry("retention.ms", broker.synonyms)
    assert entry.value == "-1"
    assert entry.type is ConfigType.LONG
    assert entry.read_only is False and entry.is_sensitive is False
    assert [(s.name, s.source) for s in entry.synonyms] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [e.name for e in topic.describe(broker.synonyms)] == sorted(TOPIC_CONFIGS)


def test_topic_source_follows_kafkas_primary_synonym_rule() -> None:
    # Kafka reports a derived broker default (log.retention.hours behind retention.ms)
    # as DEFAULT_CONFIG; only the primary synonym being set counts as the broker's.
    broker = config(log_retention_hours="24")
    topic = TopicConfig.resolve(broker.topic_defaults(), {})
    assert topic.retention_ms == 24 * 3_600_000
    assert topic.source("retention.ms", broker.synonyms) is ConfigSource.DEFAULT_CONFIG
    cleanup = topic.describe_entry("cleanup.policy", broker.synonyms)
    assert [(s.name, s.source) for s in cleanup.synonyms] == [
        ("log.cleanup.policy", ConfigSource.DEFAULT_CONFIG)
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cleanup.policy", "foo"),
        ("retention.ms", "-2"),
        ("min.insync.replicas", "0"),
        ("segment.bytes", "13"),
        ("compression.type", "ZSTD"),
        ("message.timestamp.type", "NoTime"),
        ("min.cleanable.dirty.ratio", "2"),
        ("max.message.bytes", "-1"),
        ("segment.ms", "0"),
        ("message.format.version", "9.9"),
        ("leader.replication.throttled.replicas", "0:a"),
        ("preallocate", "maybe"),
    ],
)
def test_bad_topic_values_are_rejected(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TopicConfig.resolve(default_config().topic_defaults(), {key: value})
    assert caught.value.key == key
    assert key in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-1"),
        ("retention.bytes", "-1"),
        ("cleanup.policy", "compact,delete"),
        ("cleanup.policy", ""),
        ("compression.type", "zstd"),
        ("message.format.version", "2.8"),
        ("message.format.version", "3.0-IV1"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:1,1:2"),
        ("message.timestamp.type", "LogAppendTime"),
    ],
)
def test_good_topic_values_are_accepted(key: str, value: str) -> None:
    topic = TopicConfig.resolve(default_config().topic_defaults(), {key: value})
    assert topic.overrides == {key: value}


def test_topic_name_and_null_checks() -> None:
    with pytest.raises(ConfigError, match=re.escape("Unknown topic config name: retention.hours")):
        validate_topic_overrides({"retention.hours": "1"})
    with pytest.raises(
        ConfigError, match=re.escape("Null value not supported for topic configs: retention.ms")
    ):
        validate_topic_overrides({"retention.ms": None})


def test_topic_cross_checks() -> None:
    with pytest.raises(ConfigError, match=re.escape("min.compaction.lag.ms")):
        TopicConfig.resolve(default_config().topic_defaults(), {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
        )
    with pytest.raises(ConfigError, match="Tiered Storage"):
        TopicConfig.resolve(default_config().topic_defaults(), {"remote.storage.enable": "true"})


def test_topic_timestamp_limits_fall_back_to_the_difference_setting() -> None:
    topic = TopicConfig.resolve(default_config().topic_defaults(), {"message.timestamp.difference.max.ms": "1000"})
    assert topic.timestamp_before_max_ms == 1000
    assert topic.timestamp_after_max_ms == 1000
    topic = TopicConfig.resolve(default_config().topic_defaults(),
        {"message.timestamp.difference.max.ms": "1000", "message.timestamp.after.max.ms": "50"},
    )
    assert topic.timestamp_after_max_ms == 50
    assert topic.timestamp_before_max_ms == 1000


def test_compacted_topic_segments_roll_by_compaction_lag() -> None:
    topic = TopicConfig.resolve(default_config().topic_defaults(), {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"}
    )
    assert topic.max_segment_ms == 1000
    topic = TopicConfig.resolve(default_config().topic_defaults(), {"max.compaction.lag.ms": "1000"})
    assert topic.max_segment_ms == topic.segment_ms


# --- documentation ----------------------------------------------------------------------------


def test_committed_docs_match_the_catalog() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_configuration_markdown(), "run scripts/gen_config_docs.py"


def test_docs_list_every_setting() -> None:
    text = render_configuration_markdown()
    for name in [*BROKER_CONFIGS, *TOPIC_CONFIGS, *UNIMPLEMENTED_KAFKA_CONFIGS]:
        assert f"`{name}`" in text, name


def test_authorizer_settings() -> None:
    cfg, _ = load_config(None, ["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                "super.users=User:admin; User:broker", "allow.everyone.if.no.acl.found=true"])
    assert cfg.super_users == {"User:admin", "User:broker"}
    assert cfg.allow_everyone_if_no_acl_found
    assert default_config().authorizer_class_name == "" and not default_config().allow_everyone_if_no_acl_found
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name"):
        load_config(None, ["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"])
