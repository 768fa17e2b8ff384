package cormorant.compat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

/**
 * Client quota administration (compat_tests/test_client_quotas.py): quota_cycle sets a user's
 * producer_byte_rate and a (user, client-id) consumer_byte_rate, describes the user's quotas,
 * removes the producer rate and describes again. Each entry is [entity as "type=name,..."
 * sorted, key, value].
 */
final class Quotas {
    private Quotas() {
    }

    static boolean handles(String op) {
        return "quota_cycle".equals(op);
    }

    static Object run(String op, Map<String, Object> cmd) throws Exception {
        String user = String.valueOf(cmd.get("user"));
        Properties p = new Properties();
        p.put("bootstrap.servers", String.valueOf(cmd.get("bootstrap")));
        p.put("client.id", "compat-java-quotas");
        try (Admin admin = Admin.create(p)) {
            ClientQuotaEntity userEntity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, user));
            Map<String, String> both = new HashMap<>();
            both.put(ClientQuotaEntity.USER, user);
            both.put(ClientQuotaEntity.CLIENT_ID, "app");
            admin.alterClientQuotas(List.of(
                new ClientQuotaAlteration(userEntity,
                    List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))),
                new ClientQuotaAlteration(new ClientQuotaEntity(both),
                    List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", 2048.0)))))
                .all().get(30, TimeUnit.SECONDS);
            ClientQuotaFilter filter = ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user)));
            List<Object> described = rows(admin.describeClientQuotas(filter).entities().get(30, TimeUnit.SECONDS));
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(userEntity,
                List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all().get(30, TimeUnit.SECONDS);
            List<Object> after = rows(admin.describeClientQuotas(filter).entities().get(30, TimeUnit.SECONDS));
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("described", described);
            out.put("after", after);
            return out;
        }
    }

    private static List<Object> rows(Map<ClientQuotaEntity, Map<String, Double>> entities) {
        List<String> out = new ArrayList<>();
        for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : entities.entrySet()) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<String, String> c : e.getKey().entries().entrySet()) {
                parts.add(c.getKey() + "=" + c.getValue());
            }
            parts.sort(null);
            for (Map.Entry<String, Double> q : e.getValue().entrySet()) {
                out.add(String.join(",", parts) + " " + q.getKey() + " " + q.getValue());
            }
        }
        out.sort(null);
        return new ArrayList<>(out);
    }
}
