// ACL administration of the kafkajs driver (see compat_tests/test_acls.py): acl_cycle creates a
// literal READ and a prefixed WRITE ACL for a principal, lists that principal's topic ACLs,
// deletes the literal one by filter and lists again; every ACL is [name, pattern, operation,
// permission] with kafkajs' enum names.
'use strict'

const { AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = require('kafkajs')

const nameOf = (table, code) => Object.keys(table).find((k) => table[k] === code) || String(code)

function rows(resources) {
  const out = []
  for (const r of resources) {
    for (const a of r.acls) {
      out.push([r.resourceName, nameOf(ResourcePatternTypes, r.resourcePatternType),
        nameOf(AclOperationTypes, a.operation), nameOf(AclPermissionTypes, a.permissionType)])
    }
  }
  return out.sort()
}

module.exports = (client) => {
  async function aclCycle(cmd) {
    const admin = client(cmd).admin()
    await admin.connect()
    try {
      const entry = { principal: cmd.principal, host: '*', permissionType: AclPermissionTypes.ALLOW }
      await admin.createAcls({
        acl: [
          { ...entry, resourceType: AclResourceTypes.TOPIC, resourceName: cmd.topic,
            resourcePatternType: ResourcePatternTypes.LITERAL, operation: AclOperationTypes.READ },
          { ...entry, resourceType: AclResourceTypes.TOPIC, resourceName: `${cmd.topic}-`,
            resourcePatternType: ResourcePatternTypes.PREFIXED, operation: AclOperationTypes.WRITE },
        ],
      })
      const byPrincipal = {
        // Left out (undefined): any name, any host.
        resourceType: AclResourceTypes.TOPIC, resourcePatternType: ResourcePatternTypes.ANY,
        principal: cmd.principal, operation: AclOperationTypes.ANY, permissionType: AclPermissionTypes.ANY,
      }
      const described = await admin.describeAcls(byPrincipal)
      const deleted = await admin.deleteAcls({
        filters: [{ ...byPrincipal, principal: undefined, resourceName: cmd.topic,
          resourcePatternType: ResourcePatternTypes.LITERAL }],
      })
      const matching = []
      for (const f of deleted.filterResponses) {
        for (const a of f.matchingAcls) {
          matching.push([a.resourceName, nameOf(ResourcePatternTypes, a.resourcePatternType),
            nameOf(AclOperationTypes, a.operation), nameOf(AclPermissionTypes, a.permissionType)])
        }
      }
      const after = await admin.describeAcls(byPrincipal)
      return { described: rows(described.resources), deleted: matching.sort(), after: rows(after.resources) }
    } finally {
      await admin.disconnect()
    }
  }
  return { acl_cycle: aclCycle }
}
