import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
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
 * none), and optionally consumerProps ("k=v,k=v" or "-", e.g. share.acquire.mode=record_limit)
 * and renew ("offsets:holdMs" or "-"). Acknowledges explicitly: RELEASE a first delivery of a
 * release offset, REJECT a reject offset, RENEW a renew offset until holdMs after it first came
 * (KIP-1222; the consumer hands it back on a later poll), ACCEPT the rest. Prints one JSON line
 * per record received, with the number of the poll that returned it, and stops after {@code want}
 * records were settled or the timeout.
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

    public static void main(String[] args) throws InterruptedException {
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
        if (args.length > 7 && !args[7].equals("-")) {
            for (String kv : args[7].split(",")) {
                String[] parts = kv.split("=", 2);
                props.put(parts[0], parts[1]);
            }
        }
        Set<Long> renew = new HashSet<>();
        long holdMs = 0;
        if (args.length > 8 && !args[8].equals("-")) {
            String[] parts = args[8].split(":");
            renew = offsets(parts[0]);
            holdMs = Long.parseLong(parts[1]);
        }
        Map<Long, Long> firstSeen = new HashMap<>();
        int seen = 0;
        int polls = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (seen < want && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (!records.isEmpty()) {
                    polls++;
                }
                boolean renewing = false;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    long now = System.currentTimeMillis();
                    firstSeen.putIfAbsent(r.offset(), now);
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    if (reject.contains(r.offset())) {
                        type = AcknowledgeType.REJECT;
                    } else if (release.contains(r.offset()) && count == 1) {
                        type = AcknowledgeType.RELEASE;
                    } else if (renew.contains(r.offset()) && now - firstSeen.get(r.offset()) < holdMs) {
                        type = AcknowledgeType.RENEW;
                        renewing = true;
                    }
                    consumer.acknowledge(r, type);
                    System.out.println("{\"offset\": " + r.offset() + ", \"delivery_count\": " + count
                            + ", \"ack\": \"" + type.name() + "\", \"poll\": " + polls + ", \"value\": \""
                            + new String(r.value(), StandardCharsets.UTF_8) + "\"}");
                    System.out.flush();
                    if (type != AcknowledgeType.RENEW) {
                        seen++;
                    }
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                if (renewing) {
                    Thread.sleep(300);  // a slow record: renew its lock now and then, not on every poll
                }
            }
        }
    }
}
