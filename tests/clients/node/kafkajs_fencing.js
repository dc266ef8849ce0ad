'use strict'
// Fencing of a KafkaJS producer by a second one with the same transactionalId, and the code it is told.
// KafkaJS speaks InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v1, below the versions
// that know PRODUCER_FENCED (90): to those Kafka answers a fenced producer INVALID_PRODUCER_EPOCH (47),
// the only fencing code KafkaJS knows (its error table ends at 88). Every fenced call must fail with 47.
// A transactional KafkaJS producer's connect() asks InitProducerId without the transactional id; the one
// that fences is sent by its first transaction(), so that is where the second producer fences the first.
//   1. p1 holds an open transaction with a record on partition 0 when p2.transaction() fences it (and
//      aborts p1's transaction); p1 then sends to partition 0 (Produce only: the partition is already in
//      the transaction), to partition 1 (AddPartitionsToTxn first) and commits (EndTxn).
//   2. q1 is idle, its last transaction committed, when q2 fences it; q1 then begins and sends
//      (AddPartitionsToTxn).
//   3. r1 likewise, then sendOffsets (AddOffsetsToTxn).
// A read_committed reader then sees the records of the unfenced transactions only.
const { makeKafka, unique, run, assert, describeError, readAll, dropTopics } = require('./kafkajs_lib')

const kafka = makeKafka('kafkajs-fencing')
const admin = kafka.admin()
const topic = unique('fencing')
const producers = []

function newProducer(transactionalId) {
  const p = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 30000,
    retry: { retries: 2, initialRetryTime: 100 } })
  producers.push(p)
  return p
}

// The error, or what it wraps, that carries Kafka's code 47
function invalidProducerEpoch(e) {
  for (let cause = e; cause; cause = cause.originalError || cause.cause) {
    if (cause.type === 'INVALID_PRODUCER_EPOCH' && cause.code === 47) return cause
  }
  return null
}

async function expectFenced(what, fn, failures) {
  try {
    await fn()
  } catch (e) {
    if (invalidProducerEpoch(e)) console.log(`ok ${what}: INVALID_PRODUCER_EPOCH (47)`)
    else failures.push(`${what}: failed with ${describeError(e)}, expected INVALID_PRODUCER_EPOCH (47)`)
    return
  }
  failures.push(`${what}: succeeded, expected INVALID_PRODUCER_EPOCH (47)`)
}

async function main() {
  const failures = []
  await admin.connect()
  assert(await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true }), 'createTopics')

  // 1. fenced with a transaction open
  const id1 = unique('fencing-tx1')
  const p1 = newProducer(id1)
  await p1.connect()
  const tx1 = await p1.transaction()
  await tx1.send({ topic, messages: [{ partition: 0, value: 'p1-before-fence' }] })
  const p2 = newProducer(id1)
  await p2.connect()
  const tx2 = await p2.transaction()
  await expectFenced('fenced p1 sends to partition 0 (Produce v7)',
    () => tx1.send({ topic, messages: [{ partition: 0, value: 'p1-after-fence-0' }] }), failures)
  await expectFenced('fenced p1 sends to partition 1 (AddPartitionsToTxn v1)',
    () => tx1.send({ topic, messages: [{ partition: 1, value: 'p1-after-fence-1' }] }), failures)
  await expectFenced('fenced p1 commits (EndTxn v1)', () => tx1.commit(), failures)
  await tx2.send({ topic, messages: [{ partition: 0, value: 'p2-committed' }] })
  await tx2.commit()
  console.log('ok p2 committed its own transaction')

  // 2. fenced while idle, then a send
  const id2 = unique('fencing-tx2')
  const q1 = newProducer(id2)
  await q1.connect()
  const tq1 = await q1.transaction()
  await tq1.send({ topic, messages: [{ partition: 2, value: 'q1-committed-before-fence' }] })
  await tq1.commit()
  const q2 = newProducer(id2)
  await q2.connect()
  await (await q2.transaction()).abort() // nothing sent: KafkaJS ends it without a request
  await expectFenced('idle, fenced q1 begins a transaction and sends (AddPartitionsToTxn v1)', async () => {
    const t = await q1.transaction()
    await t.send({ topic, messages: [{ partition: 2, value: 'q1-after-fence' }] })
    await t.commit()
  }, failures)

  // 3. fenced while idle, then sendOffsets
  const id3 = unique('fencing-tx3')
  const r1 = newProducer(id3)
  await r1.connect()
  const tr1 = await r1.transaction()
  await tr1.send({ topic, messages: [{ partition: 1, value: 'r1-committed-before-fence' }] })
  await tr1.commit()
  const r2 = newProducer(id3)
  await r2.connect()
  await (await r2.transaction()).abort()
  await expectFenced('idle, fenced r1 sends offsets (AddOffsetsToTxn v1)', async () => {
    const t = await r1.transaction()
    await t.sendOffsets({ consumerGroupId: unique('fencing-group'), topics: [{ topic, partitions: [{ partition: 0, offset: '1' }] }] })
    await t.commit()
  }, failures)

  const want = ['p2-committed', 'q1-committed-before-fence', 'r1-committed-before-fence']
  const seen = await readAll(kafka, topic, { until: got => want.every(w => got.some(g => g.value === w)), timeoutMs: 15000 })
  const values = seen.map(g => g.value).sort()
  if (JSON.stringify(values) !== JSON.stringify(want)) failures.push(`the read_committed reader saw ${JSON.stringify(values)}, expected ${JSON.stringify(want)}`)
  else console.log(`ok read_committed sees only ${want.join(', ')}`)
  return { failures }
}

run('kafkajs fencing', main, {
  cleanup: async () => {
    for (const p of producers) await p.disconnect().catch(() => {})
    await dropTopics(admin, [topic])
    await admin.disconnect()
  },
})
