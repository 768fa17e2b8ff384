// The load benchmark's read-back (scripts/bench_read_back.py): one kafka-clients consumer reads
// every partition of a topic from offset 0 until it has the expected number of records, and
// prints one JSON line: the count, bytes and checksum of the record values (the sum of their
// CRC32s modulo 2^64, as bench_worker.Tally computes it), the time from assign() to the last
// record and this JVM's CPU time over the same span.
//
// Usage: java ... BenchReader BOOTSTRAP TOPIC PARTITIONS EXPECTED_COUNT TIMEOUT_S FETCH_WAIT_MS

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.zip.CRC32;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;

public final class BenchReader {
    private BenchReader() {}

    private static long processCpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return -1L;
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long expected = Long.parseLong(args[3]);
        double timeoutS = Double.parseDouble(args[4]);
        int fetchWaitMs = Integer.parseInt(args[5]);

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteBufferDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteBufferDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, Integer.toString(fetchWaitMs));
        // librdkafka's defaults, which the Python read-back uses: read_committed, no CRC check.
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "false");
        // Records are handed over from the fetched buffers; a larger poll only saves calls.
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");

        long count = 0;
        long bytes = 0;
        long checksum = 0;
        List<String> errors = new ArrayList<>();
        double seconds = 0.0;
        long cpuNanos = -1L;
        long threadNanos = -1L;
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        CRC32 crc = new CRC32();
        try (KafkaConsumer<ByteBuffer, ByteBuffer> consumer = new KafkaConsumer<>(props)) {
            // Connection and metadata before the clock starts: librdkafka connects when the
            // consumer is created, so the Python read-back's clock does not include them either.
            try {
                consumer.partitionsFor(topic, Duration.ofSeconds(15));
            } catch (org.apache.kafka.common.errors.TimeoutException exc) {
                // The read below asks again, within its own time bound.
                errors.add("metadata before the read: " + exc.getMessage());
            }
            List<TopicPartition> assigned = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                assigned.add(new TopicPartition(topic, p));
            }
            long start = System.nanoTime();
            long cpuStart = processCpuNanos();
            long threadStart = threads.getCurrentThreadCpuTime();
            consumer.assign(assigned);
            for (TopicPartition tp : assigned) {
                consumer.seek(tp, 0L);
            }
            long deadline = start + (long) (timeoutS * 1e9);
            while (count < expected && System.nanoTime() < deadline) {
                ConsumerRecords<ByteBuffer, ByteBuffer> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<ByteBuffer, ByteBuffer> record : records) {
                    ByteBuffer value = record.value();
                    count++;
                    if (value == null) {
                        // Tally counts a null value as b"": CRC32 of nothing is 0.
                        continue;
                    }
                    bytes += value.remaining();
                    crc.reset();
                    crc.update(value);
                    checksum += crc.getValue();
                }
            }
            long end = System.nanoTime();
            long cpuEnd = processCpuNanos();
            threadNanos = threads.getCurrentThreadCpuTime() - threadStart;
            seconds = (end - start) / 1e9;
            cpuNanos = cpuStart >= 0 && cpuEnd >= 0 ? cpuEnd - cpuStart : -1L;
        } catch (RuntimeException exc) {
            errors.add(exc.getClass().getSimpleName() + ": " + exc.getMessage());
        }
        StringBuilder out = new StringBuilder();
        out.append("{\"count\": ").append(count);
        out.append(", \"bytes\": ").append(bytes);
        out.append(", \"checksum\": ").append(Long.toUnsignedString(checksum));
        out.append(", \"seconds\": ").append(seconds);
        out.append(", \"cpu_seconds\": ").append(cpuNanos >= 0 ? Double.toString(cpuNanos / 1e9) : "null");
        // The consumer's own thread (the client does its network I/O in poll()); the rest of
        // the process's CPU is the JIT compiler and the garbage collector.
        out.append(", \"thread_cpu_seconds\": ").append(threadNanos >= 0 ? Double.toString(threadNanos / 1e9) : "null");
        out.append(", \"errors\": [");
        for (int i = 0; i < errors.size(); i++) {
            out.append(i > 0 ? ", " : "").append(quote(errors.get(i)));
        }
        out.append("]}");
        System.out.println(out);
        System.out.flush();
    }
}
