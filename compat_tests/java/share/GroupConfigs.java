import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Java 4.x Admin on a GROUP config resource, for the group-config compat tests (kafka-clients 4
 * only: compiled by the test).
 *
 * <p>Args: bootstrap group op... where an op is {@code set:name=value}, {@code delete:name} or
 * {@code describe}. Each op is one incrementalAlterConfigs (or describeConfigs) call; prints one
 * JSON line per op: {@code {"op": ..., "ok": true}} or {@code {"op": ..., "error": class,
 * "message": ...}}, and for describe one line per entry with its value, source and synonyms.
 */
public final class GroupConfigs {
    private static String json(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\');
            }
            b.append(c < 0x20 ? ' ' : c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, args[1]);
        try (Admin admin = Admin.create(props)) {
            for (int i = 2; i < args.length; i++) {
                String op = args[i];
                try {
                    if (op.equals("describe")) {
                        Config config = admin.describeConfigs(List.of(group),
                                new DescribeConfigsOptions().includeSynonyms(true)).all().get().get(group);
                        for (ConfigEntry e : config.entries()) {
                            StringBuilder synonyms = new StringBuilder("[");
                            for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                                if (synonyms.length() > 1) {
                                    synonyms.append(", ");
                                }
                                synonyms.append("[").append(json(s.name())).append(", ").append(json(s.value()))
                                        .append(", ").append(json(s.source().name())).append("]");
                            }
                            System.out.println("{\"op\": \"describe\", \"name\": " + json(e.name()) + ", \"value\": "
                                    + json(e.value()) + ", \"source\": " + json(e.source().name())
                                    + ", \"synonyms\": " + synonyms.append("]") + "}");
                        }
                        continue;
                    }
                    AlterConfigOp alter;
                    if (op.startsWith("set:")) {
                        String[] kv = op.substring(4).split("=", 2);
                        alter = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET);
                    } else {
                        alter = new AlterConfigOp(new ConfigEntry(op.substring(7), null), AlterConfigOp.OpType.DELETE);
                    }
                    admin.incrementalAlterConfigs(Map.of(group, List.of(alter))).all().get();
                    System.out.println("{\"op\": " + json(op) + ", \"ok\": true}");
                } catch (ExecutionException ex) {
                    Throwable cause = ex.getCause();
                    System.out.println("{\"op\": " + json(op) + ", \"error\": " + json(cause.getClass().getSimpleName())
                            + ", \"message\": " + json(cause.getMessage()) + "}");
                }
                System.out.flush();
            }
        }
    }
}
