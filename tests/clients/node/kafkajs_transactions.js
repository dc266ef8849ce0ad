'use strict'
// A transactional KafkaJS producer (transactionalId: InitProducerId, AddPartitionsToTxn, EndTxn, all v1)
// runs three transactions over 3 partitions, one record each per partition: T1 commits, T2 aborts, T3
// commits. Each partition then ends at offset 6 (3 records, 3 markers); a read_committed consumer
// (readUncommitted: false) sees exactly T1's and T3's 6 records, the aborted ones filtered out by
// txnsim's aborted-transactions answer in Fetch; a read_uncommitted one sees all 9.
const { makeKafka, unique, run, assert, waitFor, readAll, dropTopics } = require('./kafkajs_lib')

const kafka = makeKafka('kafkajs-transactions')
const admin = kafka.admin()
const topic = unique('transactions')
let producer

async function oneTransaction(tag, end) {
  const tx = await producer.transaction()
  const results = []
  for (const partition of [0, 1, 2]) {
    results.push(...await tx.send({ topic, acks: -1, messages: [{ partition, key: tag, value: `${tag}-${partition}` }] }))
  }
  assert(results.every(r => r.errorCode === 0), `${tag} sends: ${JSON.stringify(results)}`)
  await (end === 'commit' ? tx.commit() : tx.abort())
  console.log(`ok ${tag}: 3 sends, ${end}`)
}

async function main() {
  await admin.connect()
  assert(await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true }), 'createTopics')
  producer = kafka.producer({ transactionalId: unique('transactions-tx'), idempotent: true, maxInFlightRequests: 1,
    transactionTimeout: 30000 })
  await producer.connect()
  await oneTransaction('t1', 'commit')
  await oneTransaction('t2', 'abort')
  await oneTransaction('t3', 'commit')

  // EndTxn is answered once the decision is logged, as Kafka's is; the markers are written after it
  await waitFor('every partition to end at 6 (3 records, 3 markers)', () => admin.fetchTopicOffsets(topic),
    ends => ends.every(o => o.high === '6'))
  console.log('ok every partition ends at 6: 3 records and 3 markers')

  const t3seen = got => [0, 1, 2].every(p => got.some(g => g.value === `t3-${p}`))
  const committed = await readAll(kafka, topic, { until: t3seen })
  const values = committed.map(g => g.value).sort()
  assert(JSON.stringify(values) === JSON.stringify(['t1-0', 't1-1', 't1-2', 't3-0', 't3-1', 't3-2']),
    `the read_committed consumer saw ${JSON.stringify(committed)}`)
  console.log(`ok read_committed saw only the committed records: ${values.join(' ')}`)

  const uncommitted = await readAll(kafka, topic, { readUncommitted: true, until: t3seen })
  assert(uncommitted.length === 9 && uncommitted.filter(g => g.value.startsWith('t2-')).length === 3,
    `the read_uncommitted consumer saw ${JSON.stringify(uncommitted)}`)
  console.log('ok read_uncommitted saw all 9, the aborted ones too')
}

run('kafkajs transactions', main, {
  cleanup: async () => {
    if (producer) await producer.disconnect()
    await dropTopics(admin, [topic])
    await admin.disconnect()
  },
})
