package cormorant.compat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Java kafka-clients driver for Cormorant's compatibility suite.
 *
 * <p>Reads one JSON command from stdin (or argv[0]), runs it with the real client and prints
 * one JSON line on stdout: {"ok": true, "result": ...} or {"ok": false, "error": {...}}. The
 * command format is described in compat_tests/harness/drivers/jsonproc.py. Client logs go to
 * stderr. Bytes travel as base64 strings.
 */
public final class Driver {
    private static final int CLIENT_MAX_REQUEST_BYTES = 16 * 1024 * 1024;

    private final Map<String, Object> cmd;
    private final long requestMs;
    private final long deliveryMs;
    private final long apiMs;

    private Driver(Map<String, Object> cmd) {
        this.cmd = cmd;
        Map<String, Object> t = obj(cmd.getOrDefault("timeouts", new HashMap<>()));
        this.requestMs = num(t.getOrDefault("request_ms", 10000L));
        this.deliveryMs = num(t.getOrDefault("delivery_ms", 20000L));
        this.apiMs = num(t.getOrDefault("api_ms", 20000L));
    }

    public static void main(String[] args) throws IOException {
        String text = args.length > 0
            ? args[0] : new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            Driver driver = new Driver(obj(Json.parse(text)));
            Object result = driver.run();
            out.put("ok", true);
            out.put("result", result);
        } catch (Throwable t) {
            out.put("ok", false);
            out.put("error", describe(t));
        }
        System.out.println(Json.write(out));
        System.out.flush();
        // Client threads (e.g. a producer's sender) must not keep the JVM alive.
        System.exit(0);
    }

    private Object run() throws Exception {
        String op = str(cmd.get("op"));
        switch (op) {
            case "capabilities":
                return Map.of("codecs", List.of("none", "gzip", "snappy", "lz4", "zstd"));
            case "produce":
                return produce();
            case "consume":
                return consume();
            case "list_offsets":
                return listOffsets();
            case "metadata":
                return metadata();
            case "create_topic":
                return createTopic();
            case "describe_configs":
                return describeConfigs();
            case "alter_config":
                return alterConfig();
            case "delete_topic":
                return deleteTopic();
            case "authorized_operations":
                return authorizedOperations();
            default:
                if (Groups.handles(op)) {
                    return Groups.run(op, cmd);
                }
                if (Transactions.handles(op)) {
                    return Transactions.run(op, cmd);
                }
                if (Acls.handles(op)) {
                    return Acls.run(op, cmd);
                }
                if (Quotas.handles(op)) {
                    return Quotas.run(op, cmd);
                }
                if (Features.handles(op)) {
                    return Features.run(op, cmd);
                }
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // -- data ---------------------------------------------------------------------------------

    private Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", str(cmd.get("bootstrap")));
        p.put("client.id", "compat-java");
        p.put("request.timeout.ms", String.valueOf(requestMs));
        clientConfig(p, cmd);
        return p;
    }

    /** Kafka client settings given as "client_config" (security.protocol, ssl.*, sasl.*). */
    static void clientConfig(Properties p, Map<String, Object> cmd) {
        Object extra = cmd.get("client_config");
        if (extra instanceof Map) {
            for (Map.Entry<?, ?> e : ((Map<?, ?>) extra).entrySet()) {
                p.put(String.valueOf(e.getKey()), String.valueOf(e.getValue()));
            }
        }
    }

    private Object produce() throws Exception {
        Properties p = common();
        long acks = num(cmd.get("acks"));
        p.put(ProducerConfig.ACKS_CONFIG, acks == -1 ? "all" : String.valueOf(acks));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, str(cmd.get("compression")));
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(CLIENT_MAX_REQUEST_BYTES));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
            String.valueOf(Math.max(deliveryMs, requestMs + 5)));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(apiMs));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        Object idempotence = cmd.get("idempotence");
        if (idempotence != null) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(idempotence));
        }
        String topic = str(cmd.get("topic"));
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (Object o : list(cmd.get("records"))) {
                Map<String, Object> r = obj(o);
                RecordHeaders headers = new RecordHeaders();
                for (Object h : list(r.get("headers"))) {
                    List<Object> pair = list(h);
                    headers.add(str(pair.get(0)), unb64(pair.get(1)));
                }
                Integer partition = r.get("partition") == null
                    ? null : (int) num(r.get("partition"));
                Long timestamp = r.get("timestamp") == null ? null : num(r.get("timestamp"));
                futures.add(producer.send(new ProducerRecord<>(
                    topic, partition, timestamp, unb64(r.get("key")), unb64(r.get("value")),
                    headers)));
            }
            producer.flush();
            List<Object> deliveries = new ArrayList<>();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get(deliveryMs + requestMs, TimeUnit.MILLISECONDS);
                deliveries.add(List.of(
                    (long) md.partition(), md.hasOffset() ? md.offset() : -1L));
            }
            return Map.of("deliveries", deliveries);
        }
    }

    private Object consume() {
        Properties p = common();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
            ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(4 * 1024 * 1024));
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(apiMs));
        String topic = str(cmd.get("topic"));
        long count = num(cmd.get("count"));
        long timeoutMs = num(cmd.get("timeout_ms"));
        List<TopicPartition> tps = new ArrayList<>();
        for (Object o : list(cmd.get("partitions"))) {
            tps.add(new TopicPartition(topic, (int) num(o)));
        }
        List<Object> records = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(tps);
            Object start = cmd.get("start");
            if ("beginning".equals(start)) {
                consumer.seekToBeginning(tps);
            } else {
                for (TopicPartition tp : tps) {
                    consumer.seek(tp, num(start));
                }
            }
            long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
            while (records.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(300))) {
                    List<Object> headers = new ArrayList<>();
                    for (Header h : r.headers()) {
                        headers.add(java.util.Arrays.asList(h.key(), b64(h.value())));
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("partition", (long) r.partition());
                    m.put("offset", r.offset());
                    m.put("key", b64(r.key()));
                    m.put("value", b64(r.value()));
                    m.put("headers", headers);
                    m.put("timestamp", r.timestamp());
                    records.add(m);
                }
            }
        }
        return Map.of("records", records);
    }

    // -- admin --------------------------------------------------------------------------------

    private Admin admin() {
        Properties p = common();
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(apiMs));
        return Admin.create(p);
    }

    private <T> T await(org.apache.kafka.common.KafkaFuture<T> future) throws Exception {
        return future.get(apiMs + 5000, TimeUnit.MILLISECONDS);
    }

    private Object listOffsets() throws Exception {
        TopicPartition tp = new TopicPartition(
            str(cmd.get("topic")), (int) num(cmd.get("partition")));
        Object spec = cmd.get("spec");
        OffsetSpec offsetSpec;
        if ("earliest".equals(spec)) {
            offsetSpec = OffsetSpec.earliest();
        } else if ("latest".equals(spec)) {
            offsetSpec = OffsetSpec.latest();
        } else {
            offsetSpec = OffsetSpec.forTimestamp(num(spec));
        }
        try (Admin admin = admin()) {
            ListOffsetsResult.ListOffsetsResultInfo info =
                await(admin.listOffsets(Map.of(tp, offsetSpec)).partitionResult(tp));
            return Map.of("offset", info.offset());
        }
    }

    private Object metadata() throws Exception {
        try (Admin admin = admin()) {
            List<Object> brokers = new ArrayList<>();
            for (Node n : await(admin.describeCluster().nodes())) {
                brokers.add(List.of((long) n.id(), n.host(), (long) n.port()));
            }
            Set<String> names = await(admin.listTopics().names());
            Map<String, Object> topics = new LinkedHashMap<>();
            if (!names.isEmpty()) {
                Map<String, TopicDescription> described =
                    await(admin.describeTopics(names).allTopicNames());
                for (TopicDescription d : described.values()) {
                    topics.put(d.name(), (long) d.partitions().size());
                }
            }
            return Map.of("brokers", brokers, "topics", topics);
        }
    }

    private Object createTopic() throws Exception {
        Map<String, String> configs = new HashMap<>();
        for (Map.Entry<String, Object> e : obj(cmd.get("configs")).entrySet()) {
            configs.put(e.getKey(), str(e.getValue()));
        }
        NewTopic topic = new NewTopic(
            str(cmd.get("name")), (int) num(cmd.get("partitions")), (short) 1).configs(configs);
        try (Admin admin = admin()) {
            await(admin.createTopics(List.of(topic)).all());
        }
        return Map.of();
    }

    private Object describeConfigs() throws Exception {
        ConfigResource resource = new ConfigResource(
            ConfigResource.Type.TOPIC, str(cmd.get("topic")));
        try (Admin admin = admin()) {
            Config config = await(admin.describeConfigs(List.of(resource)).all()).get(resource);
            Map<String, Object> out = new LinkedHashMap<>();
            for (ConfigEntry e : config.entries()) {
                out.put(e.name(), e.value());
            }
            return Map.of("configs", out);
        }
    }

    private Object alterConfig() throws Exception {
        // A topic's setting, or with "broker" a broker's ("" is the cluster default, as
        // kafka-configs --entity-default); a null value deletes the setting.
        ConfigResource resource = cmd.containsKey("broker")
            ? new ConfigResource(ConfigResource.Type.BROKER, str(cmd.get("broker")))
            : new ConfigResource(ConfigResource.Type.TOPIC, str(cmd.get("topic")));
        String value = str(cmd.get("value"));
        AlterConfigOp op = new AlterConfigOp(
            new ConfigEntry(str(cmd.get("key")), value),
            value == null ? AlterConfigOp.OpType.DELETE : AlterConfigOp.OpType.SET);
        try (Admin admin = admin()) {
            await(admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all());
        }
        return Map.of();
    }

    /**
     * The authorized operations the admin client reports with includeAuthorizedOperations:
     * of the cluster (describeCluster), of each topic (describeTopics) and of each group
     * (describeConsumerGroups); null where the client got none.
     */
    private Object authorizedOperations() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            out.put("cluster", operationNames(await(admin.describeCluster(
                new org.apache.kafka.clients.admin.DescribeClusterOptions().includeAuthorizedOperations(true))
                .authorizedOperations())));
            Map<String, Object> topics = new LinkedHashMap<>();
            List<String> names = new ArrayList<>();
            for (Object o : list(cmd.get("topics"))) {
                names.add(str(o));
            }
            if (!names.isEmpty()) {
                Map<String, TopicDescription> described = await(admin.describeTopics(names,
                    new org.apache.kafka.clients.admin.DescribeTopicsOptions().includeAuthorizedOperations(true))
                    .allTopicNames());
                for (Map.Entry<String, TopicDescription> e : described.entrySet()) {
                    topics.put(e.getKey(), operationNames(e.getValue().authorizedOperations()));
                }
            }
            out.put("topics", topics);
            Map<String, Object> groups = new LinkedHashMap<>();
            List<String> groupIds = new ArrayList<>();
            for (Object o : list(cmd.get("groups"))) {
                groupIds.add(str(o));
            }
            if (!groupIds.isEmpty()) {
                Map<String, org.apache.kafka.clients.admin.ConsumerGroupDescription> described = await(
                    admin.describeConsumerGroups(groupIds,
                        new org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions()
                            .includeAuthorizedOperations(true)).all());
                for (Map.Entry<String, org.apache.kafka.clients.admin.ConsumerGroupDescription> e
                        : described.entrySet()) {
                    groups.put(e.getKey(), operationNames(e.getValue().authorizedOperations()));
                }
            }
            out.put("groups", groups);
        }
        return out;
    }

    private static Object operationNames(Set<org.apache.kafka.common.acl.AclOperation> operations) {
        if (operations == null) {
            return null;
        }
        List<String> names = new ArrayList<>();
        for (org.apache.kafka.common.acl.AclOperation op : operations) {
            names.add(op.name());
        }
        Collections.sort(names);
        return names;
    }

    private Object deleteTopic() throws Exception {
        try (Admin admin = admin()) {
            await(admin.deleteTopics(List.of(str(cmd.get("name")))).all());
        }
        return Map.of();
    }

    // -- errors and values ---------------------------------------------------------------------

    /** The first ApiException in the cause chain names the Kafka error code. */
    private static Map<String, Object> describe(Throwable t) {
        Throwable cur = t;
        Throwable api = null;
        for (int i = 0; cur != null && i < 20; i++, cur = cur.getCause()) {
            if (cur instanceof ApiException) {
                api = cur;
                break;
            }
        }
        Throwable shown = api != null ? api
            : (t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("name", shown.getClass().getSimpleName());
        out.put("code", api != null ? (Object) (long) Errors.forException(api).code() : null);
        out.put("message", String.valueOf(shown.getMessage()));
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> obj(Object o) {
        return o == null ? Collections.emptyMap() : (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object o) {
        return o == null ? Collections.emptyList() : (List<Object>) o;
    }

    private static String str(Object o) {
        return o == null ? null : o.toString();
    }

    private static long num(Object o) {
        return ((Number) o).longValue();
    }

    private static byte[] unb64(Object o) {
        return o == null ? null : Base64.getDecoder().decode(o.toString());
    }

    private static String b64(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }
}
