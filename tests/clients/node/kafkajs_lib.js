'use strict'
// What the KafkaJS scripts share: a client for txnsim's Kafka port, a bounded run, a read-back consumer.
//
//   node kafkajs_<name>.js <kafka bootstrap servers, comma separated>
//
// Each script exits 0 when every check held, or prints `FAIL <what>: <reason>` and exits 1, within its
// deadline (55 s). At the end it prints the protocol API versions KafkaJS used, taken from its DEBUG log
// ("Request Produce(key: 0, version: 7)"): KafkaJS speaks old versions of most APIs (v1 of the
// transactional ones), which are the versions these scripts test.
// VERBOSE=1 also prints KafkaJS's own warnings and errors; TRACE=EndTxn,Produce,... prints those APIs'
// decoded responses.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const path = require('node:path')
const { Kafka, logLevel } = require('kafkajs')

const apiVersions = new Map() // "Produce(0)" -> the versions sent
const verbose = process.env.VERBOSE === '1'
const trace = new Set((process.env.TRACE || '').split(',').filter(Boolean))

function logCreator() {
  return ({ level, log }) => {
    const { message, ...extra } = log
    const request = /^Request (\w+)\(key: (\d+), version: (\d+)\)/.exec(message || '')
    if (request) {
      const name = `${request[1]}(${request[2]})`
      if (!apiVersions.has(name)) apiVersions.set(name, new Set())
      apiVersions.get(name).add(Number(request[3]))
      return
    }
    const response = /^Response (\w+)\(key: (\d+), version: (\d+)\)/.exec(message || '')
    if (response && trace.has(response[1])) {
      console.error(`[trace ${extra.broker}] ${message} ${JSON.stringify(extra.data || { error: extra.error })}`)
    } else if (verbose && level <= logLevel.WARN) {
      console.error(`[kafkajs ${level === logLevel.ERROR ? 'ERROR' : 'WARN'}] ${message} ${JSON.stringify(extra)}`)
    }
  }
}

function brokers() {
  const arg = process.argv[2]
  if (!arg) {
    console.error(`usage: node ${path.basename(process.argv[1])} <kafka bootstrap servers, e.g. 127.0.0.1:9092,127.0.0.1:9093>`)
    process.exit(2)
  }
  return arg.split(',').map(s => s.trim()).filter(Boolean)
}

function makeKafka(clientId, extra = {}) {
  return new Kafka({
    clientId,
    brokers: brokers(),
    logLevel: logLevel.DEBUG, // the request lines name the API versions; the rest is dropped unless VERBOSE
    logCreator,
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { retries: 5, initialRetryTime: 200 },
    ...extra,
  })
}

const unique = prefix => `${prefix}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6).toString(36)}`
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

function printApiVersions() {
  const rows = [...apiVersions.entries()].sort().map(([k, v]) => `${k} v${[...v].sort((a, b) => a - b).join(',v')}`)
  console.log(`API versions used by KafkaJS: ${rows.join('; ')}`)
}

function describeError(e) {
  if (!e) return String(e)
  const bits = [`${e.name}: ${e.message}`]
  if (e.type) bits.push(`type=${e.type}`)
  if (e.code !== undefined) bits.push(`code=${e.code}`)
  if (e.retriable !== undefined) bits.push(`retriable=${e.retriable}`)
  if (e.cause) bits.push(`cause=(${describeError(e.cause)})`)
  if (e.originalError) bits.push(`originalError=(${describeError(e.originalError)})`)
  return bits.join(' ')
}

// Run main() within timeoutMs: exit 0 when it resolves with no failures, else print `FAIL name: ...` and exit 1.
// main() throws at the first broken check or returns {failures: [...]} to report several; cleanup() always runs.
function run(name, main, { timeoutMs = 55000, cleanup } = {}) {
  let finished = false
  const finish = async (code, message, stack) => {
    if (finished) return
    finished = true
    if (cleanup) await Promise.race([cleanup().catch(e => console.error(`cleanup: ${describeError(e)}`)), sleep(5000)])
    printApiVersions()
    if (code === 0) {
      console.log(`PASS ${name}`)
    } else {
      console.error(`FAIL ${name}: ${message}`)
      if (stack) console.error(stack)
    }
    process.exit(code)
  }
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

// Poll `probe()` every 100 ms until `done(value)` holds; throw naming `what` and the last value at the deadline.
async function waitFor(what, probe, done, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify(value)}`)
    await sleep(100)
  }
}

// Delete those of `topics` that exist: the scripts' cleanup, after a step failed too.
async function dropTopics(admin, topics) {
  const existing = await admin.listTopics().catch(() => [])
  const left = topics.filter(t => existing.includes(t))
  if (left.length) await admin.deleteTopics({ topics: left }).catch(() => {})
}

// Consume `topic` from the beginning in a fresh group until `until(records)` holds or timeoutMs passed;
// returns the records as {partition, offset, key, value}; the caller checks what came.
async function readAll(kafka, topic, { readUncommitted = false, until, timeoutMs = 20000 } = {}) {
  const consumer = kafka.consumer({ groupId: unique('read-back'), readUncommitted, maxWaitTimeInMs: 300,
    sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const got = []
    let resolveDone
    const done = new Promise(resolve => { resolveDone = resolve })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: Number(message.offset), key: message.key && message.key.toString(),
          value: message.value && message.value.toString() })
        if (until && until(got)) resolveDone()
      },
    })
    let timer
    await Promise.race([done, new Promise(resolve => { timer = setTimeout(resolve, timeoutMs) })])
    clearTimeout(timer)
    return got
  } finally {
    await consumer.disconnect()
  }
}

module.exports = { makeKafka, unique, sleep, run, assert, waitFor, describeError, dropTopics, readAll }
