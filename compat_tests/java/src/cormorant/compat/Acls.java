package cormorant.compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeleteAclsResult;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * ACL administration (compat_tests/test_acls.py): acl_cycle creates a literal READ and a
 * prefixed WRITE ACL for a principal, lists that principal's topic ACLs, deletes the literal
 * one by filter and lists again. Each ACL is [name, pattern, operation, permission].
 */
final class Acls {
    private Acls() {
    }

    static boolean handles(String op) {
        return "acl_cycle".equals(op);
    }

    static Object run(String op, Map<String, Object> cmd) throws Exception {
        String topic = str(cmd.get("topic"));
        String principal = str(cmd.get("principal"));
        Properties p = new Properties();
        p.put("bootstrap.servers", str(cmd.get("bootstrap")));
        p.put("client.id", "compat-java-acls");
        try (Admin admin = Admin.create(p)) {
            AccessControlEntry read = new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW);
            AccessControlEntry write = new AccessControlEntry(principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW);
            admin.createAcls(List.of(
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL), read),
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic + "-", PatternType.PREFIXED), write)))
                .all().get(30, TimeUnit.SECONDS);
            AclBindingFilter byPrincipal = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, null, PatternType.ANY),
                new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.ANY));
            List<Object> described = rows(admin.describeAcls(byPrincipal).values().get(30, TimeUnit.SECONDS));
            DeleteAclsResult deleted = admin.deleteAcls(List.of(new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.LITERAL),
                AccessControlEntryFilter.ANY)));
            List<Object> removed = rows(deleted.all().get(30, TimeUnit.SECONDS));
            List<Object> after = rows(admin.describeAcls(byPrincipal).values().get(30, TimeUnit.SECONDS));
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("described", described);
            out.put("deleted", removed);
            out.put("after", after);
            return out;
        }
    }

    private static List<Object> rows(Collection<AclBinding> bindings) {
        List<List<String>> out = new ArrayList<>();
        for (AclBinding b : bindings) {
            out.add(List.of(b.pattern().name(), b.pattern().patternType().name(),
                b.entry().operation().name(), b.entry().permissionType().name()));
        }
        out.sort((a, b) -> String.join("\u0000", a).compareTo(String.join("\u0000", b)));
        return new ArrayList<>(out);
    }

    private static String str(Object o) {
        return o == null ? null : o.toString();
    }
}
