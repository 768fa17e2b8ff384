import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Client telemetry (KIP-714) with kafka-clients 4, for the client-telemetry compat tests
 * (compiled by the test).
 *
 * <p>{@code subscribe bootstrap name metrics interval match}: creates (or replaces the settings of)
 * a client metrics subscription with {@code Admin.incrementalAlterConfigs} on a CLIENT_METRICS
 * resource ({@code match} "-" for none); prints {@code {"ok": true}} or the error.
 *
 * <p>{@code produce bootstrap topic clientId seconds}: a producer with the default
 * {@code enable.metrics.push=true} sends a record every 100 ms for that long; prints its
 * client instance id ({@code {"instance": ...}}) as soon as it has one, then closes.
 */
public final class ClientTelemetry {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("subscribe")) {
            Properties props = new Properties();
            props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
            props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
            ConfigResource resource = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, args[2]);
            List<AlterConfigOp> ops = new java.util.ArrayList<>(List.of(
                    new AlterConfigOp(new ConfigEntry("metrics", args[3]), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("interval.ms", args[4]), AlterConfigOp.OpType.SET)));
            if (!args[5].equals("-")) {
                ops.add(new AlterConfigOp(new ConfigEntry("match", args[5]), AlterConfigOp.OpType.SET));
            }
            try (Admin admin = Admin.create(props)) {
                admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
                System.out.println("{\"ok\": true}");
            } catch (ExecutionException ex) {
                System.out.println("{\"error\": \"" + ex.getCause().getClass().getSimpleName() + "\"}");
            }
            return;
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[3]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        long end = System.currentTimeMillis() + Long.parseLong(args[4]) * 1000;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            boolean printed = false;
            int n = 0;
            while (System.currentTimeMillis() < end) {
                producer.send(new ProducerRecord<>(args[2], "k", "v" + n++)).get();
                if (!printed) {
                    System.out.println("{\"instance\": \"" + producer.clientInstanceId(Duration.ofSeconds(20)) + "\"}");
                    System.out.flush();
                    printed = true;
                }
                Thread.sleep(100);
            }
        }
    }
}
