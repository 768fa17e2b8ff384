"""Broker settings of the node itself: its identity and roles, its listeners and
network limits, and the settings only Cormorant has (Kafka's ``ServerConfigs``,
``KRaftConfigs``, ``SocketServerConfigs``).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_0,
    AT_LEAST_1,
    BOOLEAN,
    CLUSTER_WIDE,
    DOUBLE,
    INT,
    LIST,
    LONG,
    PER_BROKER,
    STRING,
    group,
    key,
)
from config.types import INT_MAX, ConfigKey
from config.validators import (
    Check,
    EachOneOf,
    OneOf,
    Range,
    RangeOrValue,
    check_cluster_id,
    check_host_port,
    check_voters,
)

LISTENERS_DOC: Final = (
    "NAME://host:port,... addresses to listen on; an empty host binds every interface "
    "and port 0 binds an ephemeral port."
)

NODE_AND_CLUSTER: Final[list[ConfigKey]] = group("Node and cluster", [
    key("node.id", INT, "1", "This node's id, unique in the cluster; also its id in the metadata quorum.",
        kafka_default="-1"),
    key("broker.id", INT, "-1", "Older name for node.id; if set, it must equal node.id (and supplies it when node.id is unset)."),
    key("process.roles", LIST, "broker,controller",
        "Roles this node runs: broker, controller, or both (a single-node cluster runs both).",
        EachOneOf(("broker", "controller")), kafka_default='""'),
    key("controller.quorum.voters", LIST, "",
        "Voters of the metadata quorum; empty means a quorum of this node alone.",
        Check(check_voters, "id@host:port,...")),
    key("controller.listener.names", STRING, None,
        "Comma-separated names of the listeners the controller uses; may be empty when the quorum is this node alone."),
    key("cluster.id", STRING, None,
        "The cluster id to use when formatting new storage; unset means generate one.",
        Check(check_cluster_id, "22-character base64 UUID"), cormorant_only=True),
    key("broker.rack", STRING, None, "Rack (or zone) of this broker, reported in metadata for rack-aware clients."),
    key("broker.session.timeout.ms", INT, "9000",
        "How long the controller waits without a heartbeat before fencing a broker."),
    key("broker.heartbeat.interval.ms", INT, "2000", "How often a broker heartbeats to the controller."),
    key("initial.broker.registration.timeout.ms", INT, "60000",
        "How long a starting broker waits to register with the controller before giving up."),
])  # fmt: skip

LISTENERS_AND_NETWORK: Final[list[ConfigKey]] = group("Listeners and network", [
    key("listeners", STRING, "PLAINTEXT://127.0.0.1:9092", LISTENERS_DOC, mode=PER_BROKER,
        kafka_default="PLAINTEXT://:9092"),
    key("advertised.listeners", STRING, None,
        "Addresses given to clients in metadata, if different from listeners; unset means listeners.",
        mode=PER_BROKER),
    key("listener.security.protocol.map", STRING,
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "Security protocol of each listener name, as NAME:PROTOCOL,...; when unset, controller listener names map to PLAINTEXT.",
        mode=PER_BROKER),
    key("inter.broker.listener.name", STRING, None,
        "Listener brokers use to reach each other; unset means the one named by security.inter.broker.protocol."),
    key("security.inter.broker.protocol", STRING, "PLAINTEXT",
        "Security protocol between brokers; set this or inter.broker.listener.name, not both.",
        OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
    key("socket.request.max.bytes", INT, "104857600",
        "Largest request frame accepted; a larger size prefix closes the connection.", AT_LEAST_1),
    key("socket.send.buffer.bytes", INT, "102400", "SO_SNDBUF of client sockets; -1 keeps the OS default."),
    key("socket.receive.buffer.bytes", INT, "102400", "SO_RCVBUF of client sockets; -1 keeps the OS default."),
    key("socket.listen.backlog.size", INT, "50", "Listen backlog of each listener socket.", AT_LEAST_1),
    key("connections.max.idle.ms", LONG, "600000", "Idle connections are closed after this long."),
    key("queued.max.request.bytes", LONG, "536870912",
        "Bytes of requests being read or handled, all connections together; a connection whose next "
        "frame does not fit waits, unread, until memory frees (one frame is admitted while any is left, "
        "as Kafka's memory pool does). -1 means no bound.",
        RangeOrValue(Range(min=1), -1), kafka_default="-1"),
    key("socket.request.read.timeout.ms", LONG, "60000",
        "Once a request frame has started to arrive, the rest of it must arrive within this time "
        "(waiting for request memory excluded), or the connection is closed.",
        AT_LEAST_1, cormorant_only=True),
    key("queued.max.requests", INT, "500",
        "Requests read from one connection but not yet answered before reading pauses.", AT_LEAST_1),
    key("num.network.threads", INT, "3",
        "Accepted for compatibility; Cormorant serves each connection in its own task.", AT_LEAST_1,
        CLUSTER_WIDE),
    key("num.io.threads", INT, "8",
        "Accepted for compatibility; Cormorant does not use a request thread pool.", AT_LEAST_1, CLUSTER_WIDE),
    key("max.connections", INT, str(INT_MAX),
        "Most client connections the broker holds at once, all listeners together: at the limit a "
        "listener stops accepting until one closes (listener.name.<l>.max.connections bounds one "
        "listener; the inter-broker listener is bound only by its own).", AT_LEAST_0, CLUSTER_WIDE),
    key("max.connections.per.ip", INT, str(INT_MAX),
        "Most connections from one IP address; one more is closed at once.", AT_LEAST_0, CLUSTER_WIDE),
    key("fetch.max.bytes", INT, "57671680", "Most bytes returned for one fetch request.", Range(min=1024)),
    key("max.incremental.fetch.session.cache.slots", INT, "1000",
        "Most incremental fetch sessions kept at once.", AT_LEAST_0),
])  # fmt: skip

CORMORANT: Final[list[ConfigKey]] = group("Cormorant", [
    key("metrics.listener", STRING, "127.0.0.1:9464",
        "Address of the Prometheus scrape endpoint; empty disables it.",
        Check(check_host_port, "host:port, or empty"), cormorant_only=True),
    key("log.format", STRING, "console", "Format of Cormorant's own log lines.", OneOf(("console", "json")),
        cormorant_only=True),
    key("telemetry.max.bytes", INT, "1048576",
        "Most bytes of metrics a client may send in one PushTelemetry (KIP-714); larger pushes are "
        "refused with TELEMETRY_TOO_LARGE, and a compressed push may decompress to at most four times as "
        "many.",
        AT_LEAST_1),
    key("metrics.enabled", BOOLEAN, "true",
        "Record metrics (docs/metrics.md); false also turns off the scrape endpoint and OTLP metric export.",
        cormorant_only=True),
    key("max.partitions.per.request", INT, "10000",
        "Most partitions one CreateTopics or CreatePartitions request (or one Metadata request's "
        "auto-created topics) may create: Kafka's controller writes at most 10,000 records for one "
        "request. A topic asking for more gets INVALID_PARTITIONS, topics past it in the request "
        "POLICY_VIOLATION, each with a message naming this setting.",
        AT_LEAST_1, cormorant_only=True),
    key("max.partitions.per.broker", INT, "100000",
        "Most partition replicas one broker may host; a CreateTopics or CreatePartitions that would "
        "place more on a broker gets POLICY_VIOLATION naming this setting. The default is what one "
        "broker serves within 1 GB of memory (about 6 KB per idle partition).",
        AT_LEAST_1, cormorant_only=True),
    key("event.loop.slow.step.ms", INT, "100",
        "An event-loop task step longer than this is logged (slow_task_step, with the stack it was "
        "running) and counted in cormorant.eventloop.slow_step.duration; 0 turns the watchdog off.",
        AT_LEAST_0, cormorant_only=True),
    key("event.loop.stall.abort.ms", INT, "0",
        "A task step using more CPU time than this stops the broker (exit status 70) after it is logged, "
        "so that a stall fails the test that caused it; 0 never stops. Needs event.loop.slow.step.ms > 0.",
        AT_LEAST_0, cormorant_only=True),
    key("event.loop.full.collection.interval.ms", INT, "300000",
        "How often the garbage collector's full collection runs (from a task, never inside a "
        "request). It walks only what was allocated since the one before: its survivors, and "
        "the replicas of partitions created in bulk, are frozen out of the collector's reach.",
        AT_LEAST_1, cormorant_only=True),
    key("tracing.sampling.ratio", DOUBLE, "0.0",
        "Fraction of produce, fetch, group and transaction requests traced with OpenTelemetry spans; "
        "0 turns tracing off. Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.",
        Range(min=0.0, max=1.0), cormorant_only=True),
    key("log.open.files.max", INT, "-1",
        "Most log segment and index files held open at once; the least recently used idle ones are "
        "closed to open others. -1 takes half of the open-file limit left after 128 reserved descriptors "
        "(the other half is for connections; docs/operations.md).",
        RangeOrValue(Range(min=16), -1), cormorant_only=True),
])  # fmt: skip
