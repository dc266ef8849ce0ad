'use strict'
// The RocketMQ 5 Node.js client's transactional Producer on a TRANSACTION topic, with a checker.
//  1. begin, send, commit (EndTransaction COMMIT, source CLIENT): a SimpleConsumer receives the message.
//  2. begin, send, no end: the half message waits until txnsim checks back (RecoverOrphanedTransactionCommand
//     on the producer's Telemetry stream, after the node's half_message_timeout_ms: the Node client sets no
//     orphaned_transaction_recovery_duration). The command's message needs body_digest and its topic, or the
//     client cannot decode it and never calls the checker. The checker sees the message as sent (id, body,
//     keys, tag, property) and answers COMMIT (EndTransaction, source SERVER_CHECK); the consumer then
//     receives it.
//  3. begin, send, rollback: never delivered.
// The checker is asked about the open message only. Both clients then shut down cleanly.
const { Producer, SimpleConsumer, definition, makeLogger, args, unique, createTopic, shutDownCleanly, run } = require('./rocketmq_lib')

const { TransactionResolution } = definition
const { endpoints, kafka } = args()
let producer, consumer, drop

async function main() {
  const failures = []
  const created = await createTopic(kafka, 'rmq-transaction', 'TRANSACTION')
  drop = created.drop
  const topic = created.topic

  const checks = []
  const checker = {
    async check(message) {
      checks.push({ at: Date.now(), id: message.messageId, body: message.body.toString(), keys: message.keys,
        tag: message.tag, props: Object.fromEntries(message.properties), corrupted: !!message.corrupted })
      console.log(`checker asked about ${message.messageId} (${message.body.toString()}): COMMIT`)
      return TransactionResolution.COMMIT
    },
  }
  producer = new Producer({ endpoints, namespace: '', sslEnabled: false, topics: [topic], checker, logger: makeLogger('producer') })
  await producer.startup()

  const tx1 = producer.beginTransaction()
  const r1 = await producer.send({ topic, tag: 'tx', keys: ['k-commit'], body: Buffer.from('committed-by-client'),
    properties: new Map([['p', 'one']]) }, tx1)
  await tx1.commit()
  console.log(`ok ${r1.messageId} sent and committed by the client`)

  const tx2 = producer.beginTransaction()
  const sent2 = Date.now()
  const r2 = await producer.send({ topic, tag: 'tx', keys: ['k-orphan'], body: Buffer.from('committed-by-check'),
    properties: new Map([['p', 'two']]) }, tx2)
  console.log(`ok ${r2.messageId} sent and left open (transaction ${r2.transactionId})`)

  const tx3 = producer.beginTransaction()
  const r3 = await producer.send({ topic, tag: 'tx', keys: ['k-rollback'], body: Buffer.from('rolled-back'),
    properties: new Map([['p', 'three']]) }, tx3)
  await tx3.rollback()
  console.log(`ok ${r3.messageId} sent and rolled back`)

  consumer = new SimpleConsumer({ endpoints, namespace: '', sslEnabled: false, consumerGroup: unique('rmq-transaction-group'),
    subscriptions: new Map([[topic, '*']]), awaitDuration: 3000, logger: makeLogger('consumer') })
  await consumer.startup()
  const got = new Map()
  const deadline = Date.now() + 30000
  while (!(got.has(r1.messageId) && got.has(r2.messageId)) && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 30000)) {
      got.set(m.messageId, m)
      console.log(`received ${m.messageId} (${m.body.toString()}) ${Date.now() - sent2} ms after the open one was sent`)
      await consumer.ack(m)
    }
  }
  if (!got.has(r1.messageId)) failures.push('the message the client committed was not received in 30 s')
  if (!got.has(r2.messageId)) failures.push(`the message left open was not received in 30 s (checker calls: ${checks.length})`)
  if (got.has(r3.messageId)) failures.push('the rolled-back message was delivered')
  const check2 = checks.find(c => c.id === r2.messageId)
  if (!check2) {
    failures.push(`the checker was never asked about ${r2.messageId} (it was asked: ${JSON.stringify(checks)})`)
  } else {
    console.log(`ok checked back ${check2.at - sent2} ms after the send: ${JSON.stringify(check2)}`)
    if (check2.body !== 'committed-by-check' || JSON.stringify(check2.keys) !== '["k-orphan"]' || check2.tag !== 'tx' ||
        check2.props.p !== 'two' || check2.corrupted) {
      failures.push(`the checker was shown a message other than the one sent: ${JSON.stringify(check2)}`)
    }
  }
  const others = checks.filter(c => c.id !== r2.messageId)
  if (others.length) failures.push(`the checker was also asked about decided messages: ${JSON.stringify(others)}`)
  for (const m of got.values()) {
    if (m.corrupted) failures.push(`message ${m.messageId}: its body does not match its body_digest`)
    if (m.messageId === r2.messageId && (m.properties.get('p') !== 'two' || m.tag !== 'tx')) {
      failures.push(`the message committed by the check lost its tag or properties: ${m.tag} ${JSON.stringify(Object.fromEntries(m.properties))}`)
    }
  }
  if (!failures.length) console.log('ok the client\'s commit and the check-back\'s commit delivered, the rollback not')

  await shutDownCleanly([['consumer', consumer], ['producer', producer]], failures)
  consumer = producer = null
  return { failures }
}

run('rocketmq transactional producer', main, {
  cleanup: async () => {
    if (consumer) await consumer.shutdown().catch(() => {})
    if (producer) await producer.shutdown().catch(() => {})
    if (drop) await drop()
  },
})
