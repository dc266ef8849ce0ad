'use strict'
// A RocketMQ Node.js SimpleConsumer receives the messages of every partition of a topic, whichever node
// owns it. The client keeps only the queues whose id is 0 (its load balancers compare mq.queueId with
// MASTER_BROKER_ID, meant for the broker id), so it reads one queue per broker; txnsim numbers each
// node's queues from 0, and a receive on a node's queue 0 pops every partition that node owns. One
// record is written to each of 6 partitions (two or so per node, so some sit behind queue ids above 0)
// through the Kafka port (KafkaJS, explicit partition), then the consumer receives and acks until it has
// all 6.
const { Kafka, logLevel } = require('kafkajs')
const { SimpleConsumer, makeLogger, args, unique, createTopic, run } = require('./rocketmq_lib')

const PARTITIONS = 6
const { endpoints, kafka } = args()
let consumer, producer, drop

async function main() {
  const created = await createTopic(kafka, 'rmq-all-partitions', 'NORMAL', PARTITIONS)
  drop = created.drop
  const topic = created.topic
  producer = new Kafka({ clientId: 'rocketmq-all-partitions', brokers: kafka, logLevel: logLevel.NOTHING }).producer()
  await producer.connect()
  await producer.send({ topic, acks: -1, messages: [...Array(PARTITIONS).keys()].map(p => ({ partition: p, value: `on-partition-${p}` })) })

  consumer = new SimpleConsumer({ endpoints, namespace: '', sslEnabled: false, consumerGroup: unique('rmq-all-partitions-group'),
    subscriptions: new Map([[topic, '*']]), awaitDuration: 2000, logger: makeLogger('consumer') })
  await consumer.startup()
  const got = new Set()
  const deadline = Date.now() + 15000
  while (got.size < PARTITIONS && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 20000)) {
      got.add(m.body.toString())
      await consumer.ack(m)
    }
  }
  console.log(`received: ${JSON.stringify([...got].sort())}`)
  const missing = [...Array(PARTITIONS).keys()].filter(p => !got.has(`on-partition-${p}`))
  if (missing.length) {
    return { failures: [`nothing received from partition(s) ${missing.join(', ')} in 15 s (partition -> node ${JSON.stringify(created.leaders)})`] }
  }
  console.log('ok received the record of every partition')
  return {}
}

run('rocketmq simple consumer reads every partition', main, {
  cleanup: async () => {
    if (consumer) await consumer.shutdown().catch(() => {})
    if (producer) await producer.disconnect().catch(() => {})
    if (drop) await drop()
  },
})
