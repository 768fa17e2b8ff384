// Transactional operations of the kafkajs driver (see compat_tests/harness/transactions.py).
//
// txn_produce runs a transactional producer (kafkajs requires idempotence and one request in
// flight for it) through a list of transactions, each committed or aborted, and reports
// where every record went. consume_isolated reads through a throwaway consumer group (kafkajs
// has no assign()) with read_committed (kafkajs' default) or read_uncommitted.
'use strict'

const unb64 = (s) => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))
const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))

function toHeaders(pairs) {
  const headers = {}
  for (const [name, value] of pairs || []) {
    const buf = unb64(value)
    headers[name] = name in headers ? [].concat(headers[name], [buf]) : buf
  }
  return headers
}

function fromHeaders(headers) {
  const out = []
  for (const [name, value] of Object.entries(headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) out.push([name, b64(v)])
  }
  return out
}

module.exports = (client, DriverError) => {
  async function txnProduce(cmd) {
    const producer = client(cmd).producer({
      allowAutoTopicCreation: false,
      transactionalId: cmd.transactional_id,
      idempotent: true,
      maxInFlightRequests: 1,
    })
    await producer.connect()
    const results = []
    try {
      for (const spec of cmd.transactions) {
        const txn = await producer.transaction()
        const messages = spec.records.map((r) => {
          if (r.partition === null || r.partition === undefined) {
            throw new DriverError('transactional records need an explicit partition here', null, 'UNSUPPORTED')
          }
          const m = { key: unb64(r.key), value: unb64(r.value), headers: toHeaders(r.headers), partition: r.partition }
          if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = String(r.timestamp)
          return m
        })
        const metadata = await txn.send({ topic: cmd.topic, acks: -1, messages })
        if (spec.commit) await txn.commit()
        else await txn.abort()
        // kafkajs reports one base offset per partition; a batch keeps its records' order.
        const base = {}
        for (const md of metadata) base[md.partition] = Number(md.baseOffset)
        const seen = {}
        const deliveries = messages.map((m) => {
          const rank = seen[m.partition] || 0
          seen[m.partition] = rank + 1
          return [m.partition, base[m.partition] + rank]
        })
        results.push({ deliveries, committed: !!spec.commit })
      }
    } finally {
      await producer.disconnect()
    }
    return { transactions: results }
  }

  async function consumeIsolated(cmd) {
    const consumer = client(cmd).consumer({
      groupId: `compat-kafkajs-txn-${process.pid}-${Date.now()}`,
      sessionTimeout: 10000,
      rebalanceTimeout: 10000,
      heartbeatInterval: 1000,
      maxWaitTimeInMs: 200,
      readUncommitted: cmd.isolation !== 'read_committed',
      allowAutoTopicCreation: false,
    })
    const wanted = new Set(cmd.partitions)
    const records = []
    let crash = null
    await consumer.connect()
    try {
      await consumer.subscribe({ topic: cmd.topic, fromBeginning: true })
      let finish
      const done = new Promise((resolve) => {
        finish = resolve
      })
      consumer.on(consumer.events.CRASH, (e) => {
        crash = e.payload.error
        finish()
      })
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (!wanted.has(partition)) return
          records.push({
            partition,
            offset: Number(message.offset),
            key: b64(message.key),
            value: b64(message.value),
            headers: fromHeaders(message.headers),
            timestamp: Number(message.timestamp),
          })
          if (records.length >= cmd.count) finish()
        },
      })
      const timer = setTimeout(finish, cmd.timeout_ms)
      await done
      clearTimeout(timer)
    } finally {
      await consumer.disconnect()
    }
    if (crash) throw crash
    return { records }
  }

  return { txn_produce: txnProduce, consume_isolated: consumeIsolated }
}
