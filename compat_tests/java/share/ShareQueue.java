import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A Java 4.x KafkaShareConsumer for the share-group compat tests (kafka-clients 4 only, so it is
 * compiled by the test rather than with the driver, which also builds against 3.9).
 *
 * <p>Args: bootstrap group topic want timeoutMs releaseOffsets rejectOffsets (comma lists, "-" for
 * none). Acknowledges explicitly: RELEASE a first delivery of a release offset, REJECT a reject
 * offset, ACCEPT the rest. Prints one JSON line per record received and stops after {@code want}
 * records or the timeout.
 */
public final class ShareQueue {
    private static Set<Long> offsets(String csv) {
        Set<Long> out = new HashSet<>();
        if (!csv.equals("-")) {
            for (String s : csv.split(",")) {
                out.add(Long.parseLong(s.trim()));
            }
        }
        return out;
    }

    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int want = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        Set<Long> release = offsets(args[5]);
        Set<Long> reject = offsets(args[6]);
        int seen = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (seen < want && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    if (reject.contains(r.offset())) {
                        type = AcknowledgeType.REJECT;
                    } else if (release.contains(r.offset()) && count == 1) {
                        type = AcknowledgeType.RELEASE;
                    }
                    consumer.acknowledge(r, type);
                    System.out.println("{\"offset\": " + r.offset() + ", \"delivery_count\": " + count
                            + ", \"ack\": \"" + type.name() + "\", \"value\": \""
                            + new String(r.value(), StandardCharsets.UTF_8) + "\"}");
                    System.out.flush();
                    seen++;
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
    }
}
