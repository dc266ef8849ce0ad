'use strict'
// An idempotent KafkaJS producer (InitProducerId without a transactional id, Produce v7 with sequence
// numbers) writes 30 records with keys and headers to 3 partitions, 27 in one request and 3 alone; a
// consumer in a group (JoinGroup v5 with MEMBER_ID_REQUIRED, SyncGroup, Fetch v11) reads each back once,
// in offset order per partition, headers intact, and commits; the group's committed offsets (OffsetFetch)
// then equal the end offsets, and the group is Empty once the consumer left (LeaveGroup).
const { makeKafka, unique, run, assert, sleep, dropTopics } = require('./kafkajs_lib')

const kafka = makeKafka('kafkajs-idempotent')
const admin = kafka.admin()
const topic = unique('idempotent')
const groupId = unique('idempotent-group')
const N = 30
let producer, consumer

async function main() {
  await admin.connect()
  assert(await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true }), 'createTopics')

  producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const sent = []
  for (let i = 0; i < N; i++) sent.push({ key: `k${i % 7}`, value: `v${i}`, headers: { seq: String(i) } })
  const meta = await producer.send({ topic, acks: -1, messages: sent.slice(0, N - 3) })
  for (const m of sent.slice(N - 3)) meta.push(...await producer.send({ topic, acks: -1, messages: [m] }))
  assert(meta.every(r => r.errorCode === 0), `send errors: ${JSON.stringify(meta)}`)
  const ends = await admin.fetchTopicOffsets(topic)
  const total = ends.reduce((s, o) => s + Number(o.high), 0)
  assert(total === N, `end offsets add up to ${total}, expected ${N}: ${JSON.stringify(ends)}`)
  console.log(`ok idempotent send of ${N}; end offsets ${JSON.stringify(ends.map(o => [o.partition, o.high]))}`)

  consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const got = []
  let resolveDone
  const done = new Promise(resolve => { resolveDone = resolve })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      got.push({ partition, offset: Number(message.offset), key: message.key.toString(), value: message.value.toString(),
        seq: message.headers.seq && message.headers.seq.toString() })
      if (got.length >= N) resolveDone()
    },
  })
  await Promise.race([done, sleep(30000)])
  assert(got.length === N, `the consumer got ${got.length} records in 30 s, expected ${N}`)
  const values = new Set(got.map(g => g.value))
  assert(values.size === N && sent.every(s => values.has(s.value)), 'not every value came back exactly once')
  assert(got.every(g => g.seq === g.value.slice(1) && g.key === `k${g.seq % 7}`), 'keys or headers did not come back')
  for (const p of [0, 1, 2]) {
    const offs = got.filter(g => g.partition === p).map(g => g.offset)
    assert(offs.every((o, i) => o === i), `partition ${p} gave offsets ${offs}, not 0..n-1 in order`)
  }
  console.log('ok the group consumer read back every record once, in order per partition, keys and headers intact')

  await consumer.commitOffsets(got.map(g => ({ topic, partition: g.partition, offset: String(g.offset + 1) })))
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
  const byPartition = Object.fromEntries(committed[0].partitions.map(p => [p.partition, p.offset]))
  for (const e of ends) {
    assert(byPartition[e.partition] === e.high, `committed ${JSON.stringify(byPartition)}, end offsets ${JSON.stringify(ends)}`)
  }
  console.log(`ok committed offsets ${JSON.stringify(byPartition)} are the end offsets`)

  await consumer.disconnect()
  consumer = null
  const g = (await admin.describeGroups([groupId])).groups[0]
  assert(g.state === 'Empty' && g.members.length === 0, `the group after its consumer left: ${JSON.stringify(g)}`)
  console.log('ok the group is Empty once its consumer left')
}

run('kafkajs idempotent producer and group consumer', main, {
  cleanup: async () => {
    if (consumer) await consumer.disconnect()
    if (producer) await producer.disconnect()
    await dropTopics(admin, [topic])
    await admin.disconnect()
  },
})
