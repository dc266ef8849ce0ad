'use strict'
// The RocketMQ 5 Node.js client's Producer and SimpleConsumer on a NORMAL topic. The producer's start-up
// needs a settings answer on its Telemetry stream carrying backoff_policy (exponential); each delivered
// message needs system_properties.body_digest (the client checks it and marks a mismatch corrupted).
// 3 sends with a tag, keys and a user property; the consumer receives all 3 with them intact and
// uncorrupted, changes one's invisible duration (a new receipt handle), acks all 3 (the changed one with
// its new handle), and a further receive finds nothing. Both then shut down (NotifyClientTermination),
// and neither opens its Telemetry streams again.
const { Producer, SimpleConsumer, makeLogger, args, unique, createTopic, shutDownCleanly, run, assert } = require('./rocketmq_lib')

const { endpoints, kafka } = args()
let producer, consumer, drop

async function main() {
  const failures = []
  const created = await createTopic(kafka, 'rmq-normal', 'NORMAL')
  drop = created.drop
  const topic = created.topic

  producer = new Producer({ endpoints, namespace: '', sslEnabled: false, topics: [topic], logger: makeLogger('producer') })
  await producer.startup()
  console.log('ok producer started (QueryRoute, Telemetry settings)')
  const sent = []
  for (let i = 0; i < 3; i++) {
    sent.push(await producer.send({ topic, tag: 'tagA', keys: [`key-${i}`], body: Buffer.from(`body-${i}`),
      properties: new Map([['p', `v${i}`]]) }))
  }
  console.log(`ok sent 3: ${JSON.stringify(sent.map(r => ({ messageId: r.messageId, queue: r.messageQueue.queueId, offset: r.offset })))}`)

  consumer = new SimpleConsumer({ endpoints, namespace: '', sslEnabled: false, consumerGroup: unique('rmq-normal-group'),
    subscriptions: new Map([[topic, '*']]), awaitDuration: 3000, logger: makeLogger('consumer') })
  await consumer.startup()
  const got = []
  const deadline = Date.now() + 20000
  while (got.length < 3 && Date.now() < deadline) got.push(...await consumer.receive(16, 20000))
  console.log(`received ${got.length}: ${JSON.stringify(got.map(m => ({ id: m.messageId, body: m.body.toString(), tag: m.tag,
    keys: m.keys, props: Object.fromEntries(m.properties), attempt: m.deliveryAttempt, corrupted: !!m.corrupted })))}`)
  assert(got.length === 3, `received ${got.length} of 3 in 20 s`)
  const ids = new Set(sent.map(r => r.messageId))
  assert(got.every(m => ids.has(m.messageId)) && new Set(got.map(m => m.messageId)).size === 3,
    'the received message ids are not the sent ones')
  for (const m of got) {
    const i = m.body.toString().split('-')[1]
    if (m.tag !== 'tagA' || JSON.stringify(m.keys) !== JSON.stringify([`key-${i}`]) || m.properties.get('p') !== `v${i}`) {
      failures.push(`message ${m.messageId}: tag, keys or properties not kept: ${m.tag} ${JSON.stringify(m.keys)} ${JSON.stringify(Object.fromEntries(m.properties))}`)
    }
    if (m.corrupted) failures.push(`message ${m.messageId}: its body does not match its body_digest`)
    if (m.deliveryAttempt !== 1) failures.push(`message ${m.messageId}: delivery attempt ${m.deliveryAttempt}, expected 1`)
  }

  const before = got[0].receiptHandle
  await consumer.changeInvisibleDuration(got[0], 20000)
  assert(got[0].receiptHandle && got[0].receiptHandle !== before, 'changeInvisibleDuration gave no new receipt handle')
  console.log('ok changeInvisibleDuration gave a new receipt handle')
  for (const m of got) await consumer.ack(m)
  const again = await consumer.receive(16, 20000)
  assert(again.length === 0, `a receive after the acks got ${again.length} messages`)
  console.log('ok acked 3; a further receive finds nothing')

  await shutDownCleanly([['consumer', consumer], ['producer', producer]], failures)
  consumer = producer = null
  return { failures }
}

run('rocketmq producer and simple consumer', main, {
  cleanup: async () => {
    if (consumer) await consumer.shutdown().catch(() => {})
    if (producer) await producer.shutdown().catch(() => {})
    if (drop) await drop()
  },
})
