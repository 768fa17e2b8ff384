import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The fault suite's Java writer: an idempotent acks=all kafka-clients producer writing the values
 * NAME:SEQ round-robin over the partitions of a topic at a steady rate, until its stdin closes.
 *
 * <p>Arguments: bootstrap topic partitions rate name delivery-timeout-ms. One line on stdout per
 * event: {@code S seq partition} (handed to the producer), {@code A seq partition offset}
 * (acknowledged), {@code E seq partition code exception} (failed; code is Kafka's error code, -1
 * for a client-side error such as a timeout, -2 when send() refused the record so it was never
 * sent). {@code D} when the producer closed.
 */
public final class FaultWriter {
    private static final PrintStream OUT =
        new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out)), true,
                        StandardCharsets.UTF_8);

    private static synchronized void emit(String line) {
        OUT.println(line);
    }

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        double rate = Double.parseDouble(args[3]);
        String name = args[4];
        int deliveryTimeoutMs = Integer.parseInt(args[5]);

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "fault-" + name);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Integer.toString(deliveryTimeoutMs));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        props.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        props.put(ProducerConfig.RETRY_BACKOFF_MAX_MS_CONFIG, "1000");
        props.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        props.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "5000");
        props.put(ProducerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "3000");
        props.put(ProducerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "3000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // the test writes nothing; end of input is the signal to stop
                }
            } catch (IOException e) {
                // closed
            }
            stop.set(true);
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        long intervalNanos = (long) (1_000_000_000L / rate);
        long next = System.nanoTime();
        int seq = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (!stop.get()) {
                final int s = seq++;
                final int partition = s % partitions;
                byte[] value = (name + ":" + s).getBytes(StandardCharsets.UTF_8);
                emit("S " + s + " " + partition);
                try {
                    producer.send(new ProducerRecord<>(topic, partition, null, value), (metadata, error) -> {
                        if (error == null) {
                            emit("A " + s + " " + partition + " " + metadata.offset());
                        } else {
                            int code = error instanceof ApiException && !(error instanceof
                                org.apache.kafka.common.errors.TimeoutException)
                                ? Errors.forException(error).code() : -1;
                            emit("E " + s + " " + partition + " " + code + " " + error.getClass().getSimpleName());
                        }
                    });
                } catch (RuntimeException e) {
                    emit("E " + s + " " + partition + " -2 " + e.getClass().getSimpleName());
                }
                next += intervalNanos;
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
                } else if (-wait > 1_000_000_000L) {
                    next = System.nanoTime(); // no burst after a stall
                }
            }
            producer.flush();
            producer.close(Duration.ofMillis(deliveryTimeoutMs + 10_000L));
        }
        emit("D");
    }
}
