package cormorant.compat;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consumer-group operations of the Java driver (see compat_tests/harness/groups.py).
 *
 * <p>{@code group_member} runs a subscribed consumer that prints one JSON event per line
 * ({"event": "assigned" | "revoked" | "records" | "committed" | "closed", ...}), commits
 * synchronously after every batch, and closes when stdin closes or when {@code count} records
 * arrived. The admin ops list, describe and delete groups and read committed offsets.
 */
final class Groups {
    private Groups() {
    }

    static Object run(String op, Map<String, Object> cmd) throws Exception {
        switch (op) {
            case "group_member":
                return member(cmd);
            case "list_groups":
                return listGroups(cmd);
            case "describe_group":
                return describeGroup(cmd);
            case "delete_group":
                return deleteGroup(cmd);
            case "committed_offsets":
                return committedOffsets(cmd);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    static boolean handles(String op) {
        return List.of("group_member", "list_groups", "describe_group", "delete_group", "committed_offsets")
            .contains(op);
    }

    private static synchronized void emit(String event, String key, Object value) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("event", event);
        if (key != null) {
            out.put(key, value);
        }
        System.out.println(Json.write(out));
        System.out.flush();
    }

    private static List<Object> partitions(Collection<TopicPartition> tps) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add((long) tp.partition());
        }
        Collections.sort(out, (a, b) -> Long.compare((Long) a, (Long) b));
        return out;
    }

    private static long timeout(Map<String, Object> cmd, String name, long fallback) {
        Object t = cmd.get("timeouts");
        if (t instanceof Map) {
            Object v = ((Map<?, ?>) t).get(name);
            if (v instanceof Number) {
                return ((Number) v).longValue();
            }
        }
        return fallback;
    }

    private static Object member(Map<String, Object> cmd) {
        @SuppressWarnings("unchecked")
        Map<String, Object> options = (Map<String, Object>) cmd.get("options");
        String topic = (String) cmd.get("topic");
        Long count = cmd.get("count") == null ? null : ((Number) cmd.get("count")).longValue();
        Properties p = new Properties();
        p.put("bootstrap.servers", cmd.get("bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, cmd.get("group"));
        Driver.clientConfig(p, cmd);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, options.get("client_id"));
        // The consumer protocol (KIP-848): the broker owns session, heartbeat and assignment.
        boolean consumerProtocol = "consumer".equals(options.get("group_protocol"));
        if (consumerProtocol) {
            p.put("group.protocol", "consumer");
        } else {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, String.valueOf(options.get("session_timeout_ms")));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(options.get("heartbeat_interval_ms")));
        }
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, String.valueOf(options.get("rebalance_timeout_ms")));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeout(cmd, "request_ms", 10000)));
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeout(cmd, "api_ms", 20000)));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Object assignor = options.get("assignor");
        if (assignor != null && consumerProtocol) {
            p.put("group.remote.assignor", assignor);
        } else if (assignor != null) {
            Map<String, String> classes = Map.of(
                "range", RangeAssignor.class.getName(),
                "roundrobin", RoundRobinAssignor.class.getName(),
                "sticky", StickyAssignor.class.getName(),
                "cooperative-sticky", CooperativeStickyAssignor.class.getName());
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, classes.get((String) assignor));
        }
        if (options.get("instance_id") != null) {
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, options.get("instance_id"));
        }

        AtomicBoolean stopping = new AtomicBoolean(false);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            Thread watcher = new Thread(() -> {
                try {
                    InputStream in = System.in;
                    byte[] buf = new byte[4096];
                    while (in.read(buf) >= 0) {
                        // drain until the harness closes stdin
                    }
                } catch (IOException e) {
                    // treat like EOF
                }
                stopping.set(true);
                consumer.wakeup();
            });
            watcher.setDaemon(true);
            watcher.start();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    if (!parts.isEmpty()) {
                        emit("revoked", "partitions", partitions(parts));
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    emit("assigned", "partitions", partitions(parts));
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    emit("revoked", "partitions", partitions(parts));
                }
            });
            long seen = 0;
            while (!stopping.get() && (count == null || seen < count)) {
                ConsumerRecords<byte[], byte[]> batch;
                try {
                    batch = consumer.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
                if (batch.isEmpty()) {
                    continue;
                }
                List<Object> records = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    records.add(List.of((long) r.partition(), r.offset()));
                    commit.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                seen += records.size();
                emit("records", "records", records);
                try {
                    consumer.commitSync(commit);
                } catch (WakeupException e) {
                    consumer.commitSync(commit);
                    stopping.set(true);
                }
                Map<String, Object> offsets = new TreeMap<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : commit.entrySet()) {
                    offsets.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                }
                emit("committed", "offsets", offsets);
            }
        }
        emit("closed", null, null);
        return Map.of();
    }

    private static Admin admin(Map<String, Object> cmd) {
        Properties p = new Properties();
        p.put("bootstrap.servers", cmd.get("bootstrap"));
        p.put("client.id", "compat-java");
        Driver.clientConfig(p, cmd);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeout(cmd, "request_ms", 10000)));
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeout(cmd, "api_ms", 20000)));
        return Admin.create(p);
    }

    private static <T> T await(KafkaFuture<T> future, Map<String, Object> cmd) throws Exception {
        return future.get(timeout(cmd, "api_ms", 20000) + 5000, TimeUnit.MILLISECONDS);
    }

    @SuppressWarnings("deprecation")
    private static Object listGroups(Map<String, Object> cmd) throws Exception {
        try (Admin admin = admin(cmd)) {
            Map<String, Object> groups = new TreeMap<>();
            for (ConsumerGroupListing g : await(admin.listConsumerGroups().all(), cmd)) {
                groups.put(g.groupId(), g.state().map(Object::toString).orElse(null));
            }
            return Map.of("groups", groups);
        }
    }

    private static Object describeGroup(Map<String, Object> cmd) throws Exception {
        String group = (String) cmd.get("group");
        try (Admin admin = admin(cmd)) {
            ConsumerGroupDescription d = await(admin.describeConsumerGroups(List.of(group)).all(), cmd).get(group);
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                List<Object> parts = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    parts.add(List.of(tp.topic(), (long) tp.partition()));
                }
                Map<String, Object> member = new LinkedHashMap<>();
                member.put("member_id", m.consumerId());
                member.put("client_id", m.clientId());
                member.put("host", m.host());
                member.put("instance_id", m.groupInstanceId().orElse(null));
                member.put("partitions", parts);
                members.add(member);
            }
            @SuppressWarnings("deprecation")
            String state = d.state().toString();
            return Map.of("state", state, "members", members);
        }
    }

    private static Object deleteGroup(Map<String, Object> cmd) throws Exception {
        try (Admin admin = admin(cmd)) {
            await(admin.deleteConsumerGroups(List.of((String) cmd.get("group"))).all(), cmd);
            return Map.of();
        }
    }

    private static Object committedOffsets(Map<String, Object> cmd) throws Exception {
        String topic = (String) cmd.get("topic");
        try (Admin admin = admin(cmd)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = await(
                admin.listConsumerGroupOffsets((String) cmd.get("group")).partitionsToOffsetAndMetadata(), cmd);
            Map<String, Object> out = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                if (e.getKey().topic().equals(topic) && e.getValue() != null) {
                    out.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                }
            }
            return Map.of("offsets", out);
        }
    }
}
