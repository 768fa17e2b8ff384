// Consumer-group operations of the kafkajs driver (see compat_tests/harness/groups.py).
//
// group_member runs a subscribed consumer that prints one JSON event per line
// ({"event": "assigned" | "revoked" | "records" | "committed" | "closed", ...}); kafkajs
// commits after every batch (autoCommit) and rebalances eagerly, so a rebalance revokes
// everything and the next join assigns the full new set. It stops when stdin closes or,
// with `count`, once that many records were read and committed. The admin ops list,
// describe and delete groups and read committed offsets.
'use strict'

const { AssignerProtocol } = require('kafkajs')

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...(fields || {}) }) + '\n')
}

module.exports = (client, DriverError) => {
  async function member(cmd) {
    const o = cmd.options
    if (o.assignor && o.assignor !== 'roundrobin') {
      throw new DriverError(`kafkajs has no ${o.assignor} assignor`, null, 'UNSUPPORTED')
    }
    if (o.instance_id) {
      throw new DriverError('kafkajs has no static membership', null, 'UNSUPPORTED')
    }
    const consumer = client(cmd).consumer({
      groupId: cmd.group,
      sessionTimeout: o.session_timeout_ms,
      heartbeatInterval: o.heartbeat_interval_ms,
      rebalanceTimeout: o.rebalance_timeout_ms,
      maxWaitTimeInMs: 200,
      allowAutoTopicCreation: false,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
    })
    let current = []
    let seen = 0
    let crash = null
    let finish
    const done = new Promise((resolve) => {
      finish = resolve
    })
    consumer.on(consumer.events.REBALANCING, () => {
      if (current.length) emit('revoked', { partitions: current })
      current = []
    })
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      current = [...(e.payload.memberAssignment[cmd.topic] || [])].sort((a, b) => a - b)
      emit('assigned', { partitions: current })
    })
    consumer.on(consumer.events.COMMIT_OFFSETS, (e) => {
      const offsets = {}
      for (const t of e.payload.topics) {
        if (t.topic !== cmd.topic) continue
        for (const p of t.partitions) offsets[String(p.partition)] = Number(p.offset)
      }
      emit('committed', { offsets })
      if (cmd.count !== null && cmd.count !== undefined && seen >= cmd.count) finish()
    })
    consumer.on(consumer.events.CRASH, (e) => {
      crash = e.payload.error
      finish()
    })
    process.stdin.on('end', () => finish())
    process.stdin.resume()
    await consumer.connect()
    try {
      await consumer.subscribe({ topic: cmd.topic, fromBeginning: true })
      await consumer.run({
        autoCommit: true,
        eachBatch: async ({ batch }) => {
          const records = batch.messages.map((m) => [batch.partition, Number(m.offset)])
          seen += records.length
          if (records.length) emit('records', { records })
        },
      })
      await done
    } finally {
      await consumer.disconnect()
    }
    emit('closed')
    if (crash) throw crash
    return {}
  }

  async function withAdmin(cmd, fn) {
    const admin = client(cmd).admin({ retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 } })
    await admin.connect()
    try {
      return await fn(admin)
    } finally {
      await admin.disconnect()
    }
  }

  return {
    group_member: member,
    list_groups: (cmd) =>
      withAdmin(cmd, async (admin) => {
        const res = await admin.listGroups()
        const groups = {}
        for (const g of res.groups) groups[g.groupId] = null // ListGroups v0-3 carry no state
        return { groups }
      }),
    describe_group: (cmd) =>
      withAdmin(cmd, async (admin) => {
        const res = await admin.describeGroups([cmd.group])
        const g = res.groups.find((x) => x.groupId === cmd.group)
        if (g.errorCode) throw new DriverError(`describeGroups failed`, g.errorCode)
        const members = g.members.map((m) => {
          const partitions = []
          if (m.memberAssignment && m.memberAssignment.length) {
            const decoded = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
            for (const [topic, parts] of Object.entries((decoded && decoded.assignment) || {})) {
              for (const p of parts) partitions.push([topic, p])
            }
          }
          return { member_id: m.memberId, client_id: m.clientId, host: m.clientHost, instance_id: null, partitions }
        })
        return { state: g.state, members }
      }),
    delete_group: (cmd) =>
      withAdmin(cmd, async (admin) => {
        try {
          await admin.deleteGroups([cmd.group])
        } catch (e) {
          const failed = (e.groups || []).find((x) => x.errorCode)
          if (failed) throw new DriverError(e.message, failed.errorCode, failed.error && failed.error.type)
          throw e
        }
        return {}
      }),
    committed_offsets: (cmd) =>
      withAdmin(cmd, async (admin) => {
        const res = await admin.fetchOffsets({ groupId: cmd.group, topics: [cmd.topic] })
        const offsets = {}
        for (const t of res) {
          for (const p of t.partitions) {
            if (Number(p.offset) >= 0) offsets[String(p.partition)] = Number(p.offset)
          }
        }
        return { offsets }
      }),
  }
}
