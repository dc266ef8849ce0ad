'use strict'
// Two things KafkaJS applications lean on a group for.
// 1. Consume-transform-produce: a group consumer (autoCommit off) reads 6 records from `in`; for each, a
//    transaction sends the upper-cased value to `out` and the consumer's next offset with sendOffsets
//    (AddOffsetsToTxn v1, TxnOffsetCommit v1: no generation or member id, pre-KIP-447), then commits. The
//    first record is first tried once with send + sendOffsets + abort, which must leave neither an output
//    record nor an offset. At the end `out` (read_committed) holds each transformed value once, and the
//    group's committed offsets are `in`'s end offsets: they were committed by the transactions alone.
// 2. Rebalancing (JoinGroup v5, SyncGroup v3, Heartbeat v3 answering REBALANCE_IN_PROGRESS, LeaveGroup
//    v3): consumer A alone gets all 4 partitions of a topic; when B joins, A and B own disjoint, non-empty
//    sets covering all 4; when B leaves, A owns all 4 again. Every record produced meanwhile is consumed.
const { makeKafka, unique, run, assert, sleep, waitFor, readAll, dropTopics } = require('./kafkajs_lib')

const kafka = makeKafka('kafkajs-exactly-once')
const admin = kafka.admin()
const inTopic = unique('eos-in')
const outTopic = unique('eos-out')
const rbTopic = unique('rebalance')
const open = [] // producers and consumers, disconnected at the end

async function consumeTransformProduce() {
  const plain = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  open.push(plain)
  await plain.connect()
  await plain.send({ topic: inTopic, acks: -1, messages: [0, 1, 2, 3, 4, 5].map(i => ({ partition: i % 3, value: `rec${i}` })) })
  const ends = await admin.fetchTopicOffsets(inTopic)

  const groupId = unique('eos-group')
  const producer = kafka.producer({ transactionalId: unique('eos-tx'), idempotent: true, maxInFlightRequests: 1 })
  open.push(producer)
  await producer.connect()
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 300, sessionTimeout: 10000, heartbeatInterval: 1000 })
  open.push(consumer)
  await consumer.connect()
  await consumer.subscribe({ topics: [inTopic], fromBeginning: true })
  let processed = 0
  let abortedOnce = false
  let failure = null
  let resolveDone
  const done = new Promise(resolve => { resolveDone = resolve })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      try {
        const offsets = { consumerGroupId: groupId, topics: [{ topic, partitions: [{ partition, offset: String(Number(message.offset) + 1) }] }] }
        if (!abortedOnce) {
          abortedOnce = true
          const t = await producer.transaction()
          await t.send({ topic: outTopic, messages: [{ partition, value: 'ABORTED' }] })
          await t.sendOffsets(offsets)
          await t.abort()
          console.log(`ok an attempt for ${topic}-${partition}@${message.offset} aborted (send + sendOffsets + abort)`)
        }
        const t = await producer.transaction()
        await t.send({ topic: outTopic, messages: [{ partition, value: message.value.toString().toUpperCase() }] })
        await t.sendOffsets(offsets)
        await t.commit()
        if (++processed === 6) resolveDone()
      } catch (e) {
        failure = e
        resolveDone()
      }
    },
  })
  await Promise.race([done, sleep(25000)])
  if (failure) throw failure
  assert(processed === 6, `processed ${processed} of 6 input records in 25 s`)
  await consumer.disconnect()

  // offsets committed in a transaction become the group's once its marker is written, after EndTxn's answer
  const wanted = Object.fromEntries(ends.map(e => [e.partition, e.high]))
  const byPartition = await waitFor(`the group's committed offsets to be the end offsets ${JSON.stringify(wanted)}`,
    async () => Object.fromEntries((await admin.fetchOffsets({ groupId, topics: [inTopic] }))[0].partitions
      .map(p => [p.partition, p.offset])),
    got => ends.every(e => got[e.partition] === e.high))
  console.log(`ok the group's offsets, committed by the transactions only, are the end offsets: ${JSON.stringify(byPartition)}`)

  const out = await readAll(kafka, outTopic, { until: got => got.length >= 6, timeoutMs: 10000 })
  const values = out.map(g => g.value).sort()
  assert(JSON.stringify(values) === JSON.stringify(['REC0', 'REC1', 'REC2', 'REC3', 'REC4', 'REC5']),
    `out (read_committed) holds ${JSON.stringify(values)}`)
  console.log(`ok out (read_committed) holds ${values.join(' ')}, nothing of the aborted attempt`)
}

async function rebalance() {
  const groupId = unique('rebalance-group')
  const seen = new Set()
  const owned = { A: null, B: null } // each member's partitions at its last GROUP_JOIN
  const member = name => {
    const c = kafka.consumer({ groupId, maxWaitTimeInMs: 300, sessionTimeout: 10000, heartbeatInterval: 500, rebalanceTimeout: 20000 })
    open.push(c)
    c.on(c.events.GROUP_JOIN, e => {
      owned[name] = ((e.payload.memberAssignment || {})[rbTopic] || []).slice().sort((a, b) => a - b)
      console.log(`${name} joined: leader=${e.payload.isLeader} assignment=${JSON.stringify(owned[name])}`)
    })
    return c
  }
  const waitForState = async (what, cond, ms = 20000) => {
    const t0 = Date.now()
    while (!cond()) {
      if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}: ${JSON.stringify({ owned, consumed: seen.size })}`)
      await sleep(100)
    }
    console.log(`ok ${what} (${Date.now() - t0} ms)`)
  }
  const eachMessage = async ({ message }) => { seen.add(message.value.toString()) }
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  open.push(producer)
  await producer.connect()
  const produce = async (from, to) => {
    const messages = []
    for (let i = from; i < to; i++) messages.push({ partition: i % 4, value: `m${i}` })
    await producer.send({ topic: rbTopic, acks: -1, messages })
  }

  await produce(0, 20)
  const A = member('A')
  await A.connect()
  await A.subscribe({ topics: [rbTopic], fromBeginning: true })
  await A.run({ eachMessage })
  await waitForState('A alone owns all 4 partitions', () => owned.A && owned.A.length === 4)

  const B = member('B')
  await B.connect()
  await B.subscribe({ topics: [rbTopic], fromBeginning: true })
  await B.run({ eachMessage })
  await waitForState('A and B own disjoint, non-empty sets covering all 4', () => owned.A && owned.B &&
    owned.A.length > 0 && owned.B.length > 0 && JSON.stringify([...owned.A, ...owned.B].sort()) === '[0,1,2,3]')
  await produce(20, 40)
  await waitForState('records 0..39 consumed', () => seen.size === 40)

  await B.disconnect()
  await waitForState('A owns all 4 again once B left', () => owned.A.length === 4)
  await produce(40, 48)
  await waitForState('records 40..47 consumed by A', () => seen.size === 48)
  await A.disconnect()
  const g = (await admin.describeGroups([groupId])).groups[0]
  assert(g.state === 'Empty' && g.members.length === 0, `the group after both left: ${JSON.stringify(g)}`)
  console.log('ok the group is Empty once both left')
}

async function main() {
  await admin.connect()
  assert(await admin.createTopics({ topics: [
    { topic: inTopic, numPartitions: 3 }, { topic: outTopic, numPartitions: 3 }, { topic: rbTopic, numPartitions: 4 },
  ], waitForLeaders: true }), 'createTopics')
  await consumeTransformProduce()
  await rebalance()
}

run('kafkajs exactly-once and rebalance', main, {
  cleanup: async () => {
    for (const c of open) await c.disconnect().catch(() => {})
    await dropTopics(admin, [inTopic, outTopic, rbTopic])
    await admin.disconnect()
  },
})
