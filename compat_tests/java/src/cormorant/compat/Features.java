package cormorant.compat;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;

/**
 * Cluster features through the Admin API (compat_tests/test_kafka4_features.py):
 * describe_features answers the finalized levels, the supported ranges and the epoch;
 * update_feature sets one feature's level (upgrade_type "upgrade", "safe_downgrade" or
 * "unsafe_downgrade"; validate_only for a dry run) and answers the error's class and
 * message, or null.
 */
final class Features {
    private Features() {
    }

    static boolean handles(String op) {
        return "describe_features".equals(op) || "update_feature".equals(op);
    }

    static Object run(String op, Map<String, Object> cmd) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", String.valueOf(cmd.get("bootstrap")));
        p.put("client.id", "compat-java-features");
        try (Admin admin = Admin.create(p)) {
            if ("describe_features".equals(op)) {
                return describe(admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS));
            }
            String feature = String.valueOf(cmd.get("feature"));
            short level = ((Number) cmd.get("level")).shortValue();
            FeatureUpdate.UpgradeType type = FeatureUpdate.UpgradeType.valueOf(
                String.valueOf(cmd.get("upgrade_type")).toUpperCase());
            UpdateFeaturesOptions options = new UpdateFeaturesOptions()
                .validateOnly(Boolean.TRUE.equals(cmd.get("validate_only")));
            Map<String, Object> out = new LinkedHashMap<>();
            try {
                admin.updateFeatures(Map.of(feature, new FeatureUpdate(level, type)), options)
                    .all().get(30, TimeUnit.SECONDS);
                out.put("error", null);
            } catch (ExecutionException e) {
                out.put("error", e.getCause().getClass().getSimpleName());
                out.put("message", e.getCause().getMessage());
            }
            return out;
        }
    }

    private static Object describe(FeatureMetadata metadata) {
        Map<String, Object> finalized = new TreeMap<>();
        for (Map.Entry<String, FinalizedVersionRange> e : metadata.finalizedFeatures().entrySet()) {
            finalized.put(e.getKey(), (int) e.getValue().maxVersionLevel());
        }
        Map<String, Object> supported = new TreeMap<>();
        for (Map.Entry<String, SupportedVersionRange> e : metadata.supportedFeatures().entrySet()) {
            supported.put(e.getKey(), java.util.List.of((int) e.getValue().minVersion(), (int) e.getValue().maxVersion()));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("finalized", finalized);
        out.put("supported", supported);
        out.put("epoch", metadata.finalizedFeaturesEpoch().isPresent() ? metadata.finalizedFeaturesEpoch().get() : null);
        return out;
    }
}
