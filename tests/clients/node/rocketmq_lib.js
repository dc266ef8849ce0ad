'use strict'
// What the RocketMQ Node.js client scripts share: the endpoint, a fresh topic, the clients' log, a bounded run.
//
//   node rocketmq_<name>.js <rocketmq endpoints> <kafka bootstrap servers>
//
// <rocketmq endpoints>: a node's txnsim address, or all of them joined by ';' (LocalCluster.rocketmq_endpoints,
//   what `txnsim cluster start` prints). The Node client takes one address only: it joins several with ','
//   into one grpc-js target, which the dns resolver cannot resolve. So the first is used; QueryRoute then
//   names every node's own address, and the client reaches all of them.
// <kafka bootstrap servers>: each script creates its own topic through txnsim's Kafka port (CreateTopics with
//   message.type) and deletes it at the end.
//
// Each script exits 0 when every check held, or prints `FAIL <what>: <reason>` and exits 1, within its
// deadline (55 s). The client throws inside gRPC stream handlers when an answer lacks a field it needs
// (an uncaught exception): that is reported as a failure too, with its stack. The clients' warnings and
// errors go to stderr; VERBOSE=1 prints all their log lines.
const util = require('node:util')
const path = require('node:path')
const { Kafka, logLevel } = require('kafkajs')
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs')

const pkgDir = path.dirname(require.resolve('rocketmq-client-nodejs/package.json'))
const definition = require(path.join(pkgDir, 'proto/apache/rocketmq/v2/definition_pb'))

const verbose = process.env.VERBOSE === '1'
const clientLog = [] // every line the clients logged: {t, name, level, text}

// A logger for the client (without one it writes ~/logs/rocketmq/rocketmq_client_nodejs.log)
function makeLogger(name) {
  const line = (level, args) => {
    const text = `[rmq ${name} ${level}] ${util.format(...args)}`
    clientLog.push({ t: Date.now(), name, level, text })
    if (verbose || level === 'WARN' || level === 'ERROR') console.error(text)
  }
  return {
    info: (...a) => line('INFO', a),
    debug: (...a) => line('DEBUG', a),
    warn: (...a) => line('WARN', a),
    error: (...a) => line('ERROR', a),
    close: () => {},
  }
}

function args() {
  const [rmq, kafka] = process.argv.slice(2)
  if (!rmq || !kafka) {
    console.error(`usage: node ${path.basename(process.argv[1])} <rocketmq endpoints, e.g. 127.0.0.1:26611;127.0.0.1:28603> <kafka bootstrap servers>`)
    process.exit(2)
  }
  return { endpoints: rmq.split(/[;,]/).map(s => s.trim()).filter(Boolean)[0], kafka: kafka.split(',') }
}

const unique = prefix => `${prefix}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6).toString(36)}`
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// A fresh topic of `messageType` (NORMAL, TRANSACTION, ...), created through the Kafka port; returns the
// topic, each partition's leader node and drop() to delete it.
async function createTopic(kafkaBrokers, prefix, messageType, partitions = 3) {
  const admin = new Kafka({ clientId: 'rocketmq-topic-admin', brokers: kafkaBrokers, logLevel: logLevel.NOTHING }).admin()
  await admin.connect()
  const topic = unique(prefix)
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, configEntries: [{ name: 'message.type', value: messageType }] }],
    waitForLeaders: true })
  const leaders = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions
    .map(p => [p.partitionId, p.leader]).sort((a, b) => a[0] - b[0])
  console.log(`created topic ${topic} (${partitions} partitions, message.type=${messageType}; partition -> node ${JSON.stringify(leaders)})`)
  return {
    topic,
    leaders,
    drop: async () => {
      await admin.deleteTopics({ topics: [topic] }).catch(() => {})
      await admin.disconnect()
    },
  }
}

// Shut the clients down, then watch them for 2.5 s: a client that takes a server's end of its Telemetry
// stream as a broken stream opens a new one 1 s later (TelemetrySession's #onEnd -> #renewStream(false)),
// registering again and keeping the process alive. The server must leave the streams to the client's
// half-close, as RocketMQ's proxy does (it ends a stream only in onCompleted).
async function shutDownCleanly(clients, failures) {
  const since = Date.now()
  for (const [name, client] of clients) {
    try {
      await client.shutdown()
    } catch (e) {
      failures.push(`${name}.shutdown(): ${describeError(e)}`)
    }
  }
  await sleep(2500)
  const reopened = clientLog.filter(l => l.t >= since && /Creating telemetry stream, .*inited=false/.test(l.text))
  if (reopened.length) {
    failures.push(`after shutdown() the clients opened ${reopened.length} new Telemetry stream(s): ` +
      reopened.map(l => l.text.replace(/, clientId=.*/, '')).join(' | '))
  } else {
    console.log('ok shut down; no Telemetry stream opened again afterwards')
  }
}

function describeError(e) {
  if (!e) return String(e)
  let s = `${e.name}: ${e.message}`
  if (e.code !== undefined) s += ` code=${e.code}`
  if (e.cause) s += ` cause=(${describeError(e.cause)})`
  return s
}

// Run main() within timeoutMs: exit 0 when it resolves with no failures, else print `FAIL name: ...` and exit 1.
// main() throws at the first broken check or returns {failures: [...]} to report several; cleanup() always runs.
function run(name, main, { timeoutMs = 55000, cleanup } = {}) {
  let finished = false
  const finish = async (code, message, stack) => {
    if (finished) return
    finished = true
    if (cleanup) await Promise.race([cleanup().catch(e => console.error(`cleanup: ${describeError(e)}`)), sleep(8000)])
    if (code === 0) {
      console.log(`PASS ${name}`)
    } else {
      console.error(`FAIL ${name}: ${message}`)
      if (stack) console.error(stack)
    }
    process.exit(code)
  }
  process.on('uncaughtException', e => finish(1, `uncaught exception inside the client: ${describeError(e)}`, e && e.stack))
  process.on('unhandledRejection', e => finish(1, `unhandled rejection inside the client: ${describeError(e)}`, e && e.stack))
  setTimeout(() => finish(1, `timed out after ${timeoutMs} ms`), timeoutMs).unref()
  main().then(
    result => result && result.failures && result.failures.length
      ? finish(1, `\n  - ${result.failures.join('\n  - ')}`)
      : finish(0),
    e => finish(1, describeError(e), e && e.stack))
}

function assert(cond, message) {
  if (!cond) throw new Error(`assertion failed: ${message}`)
}

module.exports = {
  Producer, SimpleConsumer, definition, makeLogger, args, unique, sleep, createTopic, shutDownCleanly, run, assert,
  describeError,
}
