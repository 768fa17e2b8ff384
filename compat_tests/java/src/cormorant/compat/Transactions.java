package cormorant.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional operations of the Java driver (see compat_tests/harness/transactions.py).
 *
 * <p>{@code txn_produce} runs a transactional producer (idempotent, acks=all: the client's
 * defaults) through a list of transactions, each committed or aborted, and reports where every
 * record went. {@code consume_isolated} reads with a chosen isolation level.
 * {@code consume_transform_produce} copies {@code count} records of a topic to another, each
 * batch in a transaction with the group's offsets ({@code sendOffsetsToTransaction}); every
 * {@code abort_every}-th batch is aborted and the consumer rewound to the committed offsets.
 */
final class Transactions {
    private Transactions() {
    }

    static boolean handles(String op) {
        return List.of("txn_produce", "consume_isolated", "consume_transform_produce").contains(op);
    }

    static Object run(String op, Map<String, Object> cmd) throws Exception {
        switch (op) {
            case "txn_produce":
                return produce(cmd);
            case "consume_isolated":
                return consume(cmd);
            case "consume_transform_produce":
                return consumeTransformProduce(cmd);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static Properties common(Map<String, Object> cmd) {
        Map<String, Object> t = obj(cmd.get("timeouts"));
        Properties p = new Properties();
        p.put("bootstrap.servers", str(cmd.get("bootstrap")));
        Driver.clientConfig(p, cmd);
        p.put("client.id", "compat-java-txn");
        p.put("request.timeout.ms", String.valueOf(num(t.getOrDefault("request_ms", 10000L))));
        return p;
    }

    private static Object produce(Map<String, Object> cmd) throws Exception {
        Map<String, Object> t = obj(cmd.get("timeouts"));
        long requestMs = num(t.getOrDefault("request_ms", 10000L));
        long deliveryMs = num(t.getOrDefault("delivery_ms", 20000L));
        Properties p = common(cmd);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, str(cmd.get("transactional_id")));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(Math.max(deliveryMs, requestMs + 5)));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(num(t.getOrDefault("api_ms", 20000L))));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        String topic = str(cmd.get("topic"));
        List<Object> results = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (Object o : list(cmd.get("transactions"))) {
                Map<String, Object> txn = obj(o);
                producer.beginTransaction();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                for (Object ro : list(txn.get("records"))) {
                    Map<String, Object> r = obj(ro);
                    RecordHeaders headers = new RecordHeaders();
                    for (Object h : list(r.get("headers"))) {
                        List<Object> pair = list(h);
                        headers.add(str(pair.get(0)), unb64(pair.get(1)));
                    }
                    Integer partition = r.get("partition") == null ? null : (int) num(r.get("partition"));
                    Long timestamp = r.get("timestamp") == null ? null : num(r.get("timestamp"));
                    futures.add(producer.send(new ProducerRecord<>(
                        topic, partition, timestamp, unb64(r.get("key")), unb64(r.get("value")), headers)));
                }
                producer.flush();
                List<Object> deliveries = new ArrayList<>();
                for (Future<RecordMetadata> f : futures) {
                    RecordMetadata md = f.get(deliveryMs + requestMs, TimeUnit.MILLISECONDS);
                    deliveries.add(List.of((long) md.partition(), md.hasOffset() ? md.offset() : -1L));
                }
                boolean commit = Boolean.TRUE.equals(txn.get("commit"));
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("deliveries", deliveries);
                out.put("committed", commit);
                results.add(out);
            }
        }
        return Map.of("transactions", results);
    }

    private static Object consume(Map<String, Object> cmd) {
        Properties p = common(cmd);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, str(cmd.get("isolation")));
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
            consumer.seekToBeginning(tps);
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
            Map<String, Object> ends = new LinkedHashMap<>();
            for (TopicPartition tp : tps) {
                ends.put(String.valueOf(tp.partition()), consumer.position(tp));
            }
            return Map.of("records", records, "positions", ends);
        }
    }

    private static Object consumeTransformProduce(Map<String, Object> cmd) {
        Map<String, Object> t = obj(cmd.get("timeouts"));
        long apiMs = num(t.getOrDefault("api_ms", 20000L));
        Properties cp = common(cmd);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, str(cmd.get("group")));
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(apiMs));
        Properties pp = common(cmd);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, str(cmd.get("transactional_id")));
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "2");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(apiMs));
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        String source = str(cmd.get("source"));
        String target = str(cmd.get("target"));
        byte[] prefix = str(cmd.get("prefix")).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        long count = num(cmd.get("count"));
        long abortEvery = num(cmd.get("abort_every"));
        long deadline = System.nanoTime() + num(cmd.get("timeout_ms")) * 1_000_000L;
        long copied = 0;
        long batches = 0;
        long aborted = 0;
        long sendOffsetsMaxMs = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));
            while (copied < count && System.nanoTime() < deadline) {
                org.apache.kafka.clients.consumer.ConsumerRecords<byte[], byte[]> batch =
                    consumer.poll(Duration.ofMillis(300));
                if (batch.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    byte[] value = new byte[prefix.length + r.value().length];
                    System.arraycopy(prefix, 0, value, 0, prefix.length);
                    System.arraycopy(r.value(), 0, value, prefix.length, r.value().length);
                    producer.send(new ProducerRecord<>(target, r.partition(), r.key(), value));
                }
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                    new java.util.HashMap<>();
                for (TopicPartition tp : batch.partitions()) {
                    offsets.put(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(consumer.position(tp)));
                }
                long started = System.nanoTime();
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                sendOffsetsMaxMs = Math.max(sendOffsetsMaxMs, (System.nanoTime() - started) / 1_000_000L);
                if (abortEvery > 0 && batches % abortEvery == abortEvery - 1) {
                    producer.abortTransaction();
                    aborted++;
                    Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> committed =
                        consumer.committed(consumer.assignment());
                    for (TopicPartition tp : consumer.assignment()) {
                        org.apache.kafka.clients.consumer.OffsetAndMetadata c = committed.get(tp);
                        if (c == null) {
                            consumer.seekToBeginning(List.of(tp));
                        } else {
                            consumer.seek(tp, c.offset());
                        }
                    }
                } else {
                    producer.commitTransaction();
                    copied += batch.count();
                }
                batches++;
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("copied", copied);
        out.put("batches", batches);
        out.put("aborted", aborted);
        out.put("send_offsets_max_ms", sendOffsetsMaxMs);
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
