#!/usr/bin/env node
// kafkajs 2.2.4 driver for the compatibility suite.
//
// Reads one JSON command from stdin (or from argv[2]) and prints exactly one JSON line on
// stdout: {"ok": true, "result": ...} or {"ok": false, "error": {name, type, code, message}}.
// kafkajs logs go to stderr. Bytes travel as base64 strings, null stays null.
// The command format is shared with the Java driver; see compat_tests/harness/drivers/jsonproc.py.
'use strict'

const { Kafka, logLevel, CompressionTypes, CompressionCodecs, ConfigResourceTypes, Partitioners } = require('kafkajs')

const loadedCodecs = ['none', 'gzip']
try {
  CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
  loadedCodecs.push('snappy')
} catch (e) {
  process.stderr.write(`kafkajs-snappy unavailable: ${e.message}\n`)
}
try {
  const LZ4Codec = require('kafkajs-lz4')
  CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec
  loadedCodecs.push('lz4')
} catch (e) {
  process.stderr.write(`kafkajs-lz4 unavailable: ${e.message}\n`)
}

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = (s) => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function client(cmd) {
  const t = cmd.timeouts || {}
  return new Kafka({
    clientId: 'compat-kafkajs',
    brokers: [cmd.bootstrap],
    logLevel: logLevel.ERROR,
    logCreator: stderrLogger,
    connectionTimeout: 5000,
    requestTimeout: t.request_ms || 10000,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    // Secured listeners: kafkajs' own ssl (tls.connect options) and sasl settings, as given.
    ...(cmd.ssl ? { ssl: cmd.ssl } : {}),
    ...(cmd.sasl ? { sasl: cmd.sasl } : {}),
  })
}

class DriverError extends Error {
  constructor(message, code, type) {
    super(message)
    this.name = 'DriverError'
    this.code = code
    this.type = type
  }
}

// Flatten [[name, b64], ...] into kafkajs' header object; repeated names become arrays.
function toHeaders(pairs) {
  const headers = {}
  for (const [name, value] of pairs || []) {
    const buf = unb64(value)
    if (name in headers) {
      headers[name] = [].concat(headers[name], [buf])
    } else {
      headers[name] = buf
    }
  }
  return headers
}

function fromHeaders(headers) {
  const out = []
  for (const [name, value] of Object.entries(headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) {
      out.push([name, b64(v)])
    }
  }
  return out
}

async function produce(cmd) {
  const kafka = client(cmd)
  const producer = kafka.producer({
    allowAutoTopicCreation: false,
    idempotent: cmd.idempotence === true,
    createPartitioner: Partitioners.DefaultPartitioner,
  })
  await producer.connect()
  try {
    const compression = COMPRESSION[cmd.compression]
    if (compression === undefined || !loadedCodecs.includes(cmd.compression)) {
      throw new DriverError(`codec ${cmd.compression} unavailable in kafkajs`, null, 'UNSUPPORTED_CODEC')
    }
    const messages = cmd.records.map((r) => {
      const m = { key: unb64(r.key), value: unb64(r.value), headers: toHeaders(r.headers) }
      if (r.partition !== null && r.partition !== undefined) m.partition = r.partition
      if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = String(r.timestamp)
      return m
    })
    const metadata = await producer.send({
      topic: cmd.topic,
      acks: cmd.acks,
      compression,
      timeout: (cmd.timeouts || {}).request_ms || 10000,
      messages,
    })
    if (cmd.acks === 0 || messages.some((m) => m.partition === undefined)) {
      // acks=0 has no offsets; without explicit partitions kafkajs does not say where each
      // record went.
      return { deliveries: messages.map((m) => [m.partition === undefined ? -1 : m.partition, null]) }
    }
    // kafkajs reports one base offset per partition; a batch keeps its records' order.
    const base = {}
    for (const md of metadata) base[md.partition] = Number(md.baseOffset)
    const seen = {}
    const deliveries = messages.map((m) => {
      const rank = seen[m.partition] || 0
      seen[m.partition] = rank + 1
      return [m.partition, base[m.partition] + rank]
    })
    return { deliveries }
  } finally {
    await producer.disconnect()
  }
}

async function consume(cmd) {
  // kafkajs has no assign(): a throwaway group reads the topic and records outside the
  // requested partitions are dropped.
  const kafka = client(cmd)
  const groupId = `compat-kafkajs-${process.pid}-${Date.now()}`
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    allowAutoTopicCreation: false,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
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
    if (cmd.start !== 'beginning') {
      for (const p of cmd.partitions) consumer.seek({ topic: cmd.topic, partition: p, offset: String(cmd.start) })
    }
    const timer = setTimeout(finish, cmd.timeout_ms)
    await done
    clearTimeout(timer)
    if (cmd.commit && !crash && records.length) {
      const next = {}
      for (const r of records) next[r.partition] = Math.max(next[r.partition] || 0, r.offset + 1)
      await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => (
        { topic: cmd.topic, partition: Number(partition), offset: String(offset) })))
    }
  } finally {
    await consumer.disconnect()
  }
  if (crash) throw crash
  return { records, group: groupId }
}

async function withAdmin(cmd, fn) {
  const admin = client(cmd).admin({ retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 } })
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

async function listOffsets(cmd) {
  return withAdmin(cmd, async (admin) => {
    let rows
    if (cmd.spec === 'earliest' || cmd.spec === 'latest') {
      rows = await admin.fetchTopicOffsets(cmd.topic)
      const row = rows.find((r) => r.partition === cmd.partition)
      return { offset: Number(cmd.spec === 'earliest' ? row.low : row.high) }
    }
    rows = await admin.fetchTopicOffsetsByTimestamp(cmd.topic, cmd.spec)
    const row = rows.find((r) => r.partition === cmd.partition)
    return { offset: Number(row.offset) }
  })
}

async function metadata(cmd) {
  return withAdmin(cmd, async (admin) => {
    const cluster = await admin.describeCluster()
    const names = await admin.listTopics()
    const topics = {}
    if (names.length) {
      const md = await admin.fetchTopicMetadata({ topics: names })
      for (const t of md.topics) topics[t.name] = t.partitions.length
    }
    return { brokers: cluster.brokers.map((b) => [b.nodeId, b.host, b.port]), topics }
  })
}

async function createTopic(cmd) {
  return withAdmin(cmd, async (admin) => {
    const created = await admin.createTopics({
      waitForLeaders: true,
      timeout: (cmd.timeouts || {}).api_ms || 20000,
      topics: [
        {
          topic: cmd.name,
          numPartitions: cmd.partitions,
          replicationFactor: 1,
          configEntries: Object.entries(cmd.configs || {}).map(([name, value]) => ({ name, value })),
        },
      ],
    })
    if (!created) throw new DriverError(`topic ${cmd.name} already exists`, 36, 'TOPIC_ALREADY_EXISTS')
    return {}
  })
}

async function describeConfigs(cmd) {
  return withAdmin(cmd, async (admin) => {
    const res = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: cmd.topic }],
    })
    const configs = {}
    for (const r of res.resources) {
      if (r.errorCode) throw new DriverError(r.errorMessage || 'describeConfigs failed', r.errorCode)
      for (const e of r.configEntries) configs[e.configName] = e.configValue
    }
    return { configs }
  })
}

async function alterConfig(cmd) {
  return withAdmin(cmd, async (admin) => {
    const res = await admin.alterConfigs({
      validateOnly: false,
      resources: [
        { type: ConfigResourceTypes.TOPIC, name: cmd.topic, configEntries: [{ name: cmd.key, value: cmd.value }] },
      ],
    })
    for (const r of res.resources) {
      if (r.errorCode) throw new DriverError(r.errorMessage || 'alterConfigs failed', r.errorCode)
    }
    return {}
  })
}

async function deleteTopic(cmd) {
  return withAdmin(cmd, async (admin) => {
    await admin.deleteTopics({ topics: [cmd.name], timeout: (cmd.timeouts || {}).api_ms || 20000 })
    return {}
  })
}

const groupOps = require('./groups')(client, DriverError)
const txnOps = require('./transactions')(client, DriverError)
const aclOps = require('./acls')(client)

const OPS = {
  ...groupOps,
  ...txnOps,
  ...aclOps,
  capabilities: async () => ({ codecs: loadedCodecs }),
  produce,
  consume,
  list_offsets: listOffsets,
  metadata,
  create_topic: createTopic,
  describe_configs: describeConfigs,
  alter_config: alterConfig,
  delete_topic: deleteTopic,
}

// Find the Kafka error code in kafkajs' wrappers (retries exceeded, aggregate errors).
function describeError(e) {
  const seen = new Set()
  const queue = [e]
  while (queue.length) {
    const cur = queue.shift()
    if (!cur || seen.has(cur)) continue
    seen.add(cur)
    if (typeof cur.code === 'number' || cur.type) {
      return { name: cur.name, type: cur.type || null, code: typeof cur.code === 'number' ? cur.code : null, message: String(cur.message) }
    }
    queue.push(cur.cause, cur.originalError, ...(Array.isArray(cur.errors) ? cur.errors : []))
  }
  return { name: e && e.name, type: null, code: null, message: String(e && (e.stack || e.message || e)) }
}

async function readStdin() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return Buffer.concat(chunks).toString('utf8')
}

async function main() {
  const text = process.argv[2] || (await readStdin())
  const cmd = JSON.parse(text)
  const op = OPS[cmd.op]
  let out
  try {
    if (!op) throw new DriverError(`unknown op ${cmd.op}`)
    out = { ok: true, result: await op(cmd) }
  } catch (e) {
    out = { ok: false, error: describeError(e) }
  }
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0))
}

main().catch((e) => {
  process.stderr.write(`driver crashed: ${e && e.stack}\n`)
  process.exit(2)
})
