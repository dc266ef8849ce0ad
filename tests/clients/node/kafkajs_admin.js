'use strict'
// KafkaJS's admin client against txnsim's Kafka port: creating topics (twice: the second answers
// TOPIC_ALREADY_EXISTS, which KafkaJS returns as false), listing them without the internal ones, metadata
// with a leader per partition, offsets, an unknown group (Dead), topic configs read and replaced
// (DescribeConfigs, AlterConfigs), partitions added (CreatePartitions), records deleted below an offset
// (DeleteRecords: the log start moves) and a topic deleted (then unknown). KafkaJS checks ApiVersions
// before each call and refuses an API a broker does not list, so each call here also proves txnsim lists
// the API at a version KafkaJS speaks.
const { ConfigResourceTypes } = require('kafkajs')
const { makeKafka, unique, run, assert, describeError, dropTopics } = require('./kafkajs_lib')

const kafka = makeKafka('kafkajs-admin')
const admin = kafka.admin()
const topic = unique('admin')
let producer

async function topicConfig(name) {
  const described = await admin.describeConfigs({ includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name }] })
  const resource = described.resources[0]
  assert(resource.errorCode === 0 && resource.resourceName === name, `describeConfigs: ${JSON.stringify(resource)}`)
  return new Map(resource.configEntries.map(e => [e.configName, e]))
}

async function main() {
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
  assert(created === true, `createTopics returned ${created}, expected true`)
  const again = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }] })
  assert(again === false, `createTopics of an existing topic returned ${again}, expected false`)
  console.log(`ok createTopics ${topic}; again -> false`)

  const topics = await admin.listTopics()
  assert(topics.includes(topic), `listTopics lacks ${topic}: ${JSON.stringify(topics)}`)
  assert(!topics.some(t => t.startsWith('__')), `listTopics lists internal topics: ${JSON.stringify(topics)}`)
  console.log(`ok listTopics (${topics.length} topics, no internal ones)`)

  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  const parts = md.topics[0].partitions
  assert(md.topics[0].name === topic && parts.length === 3, `fetchTopicMetadata: ${JSON.stringify(md)}`)
  assert(parts.every(p => p.leader >= 0 && p.partitionErrorCode === 0), `partitions without a leader: ${JSON.stringify(parts)}`)
  console.log(`ok fetchTopicMetadata leaders ${JSON.stringify(parts.map(p => [p.partitionId, p.leader]))}`)

  const offsets = await admin.fetchTopicOffsets(topic)
  assert(offsets.length === 3 && offsets.every(o => o.offset === '0' && o.low === '0' && o.high === '0'),
    `fetchTopicOffsets of an empty topic: ${JSON.stringify(offsets)}`)
  console.log('ok fetchTopicOffsets 0/0/0')

  const group = unique('no-such-group')
  const g = (await admin.describeGroups([group])).groups[0]
  assert(g.groupId === group && g.state === 'Dead' && g.members.length === 0 && g.errorCode === 0,
    `describeGroups of an unknown group: ${JSON.stringify(g)}`)
  const listed = await admin.listGroups()
  assert(Array.isArray(listed.groups), `listGroups: ${JSON.stringify(listed)}`)
  console.log(`ok describeGroups of an unknown group -> Dead; listGroups (${listed.groups.length} groups)`)

  // DescribeConfigs v2, AlterConfigs v1 (which replaces the topic's whole set of settings, as Kafka's does)
  const before = await topicConfig(topic)
  const policy = before.get('cleanup.policy')
  assert(policy && policy.configValue === 'delete' && policy.isDefault, `cleanup.policy: ${JSON.stringify(policy)}`)
  assert(before.has('retention.ms') && before.has('max.message.bytes'), `configs listed: ${[...before.keys()]}`)
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
    configEntries: [{ name: 'retention.ms', value: '3600000' }] }] })
  const retention = (await topicConfig(topic)).get('retention.ms')
  assert(retention.configValue === '3600000' && !retention.isDefault, `retention.ms after alterConfigs: ${JSON.stringify(retention)}`)
  console.log(`ok describeConfigs (${before.size} settings); alterConfigs retention.ms=3600000 read back`)

  // CreatePartitions v1: 3 -> 4, and the new partition gets a leader
  await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
  const grown = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions
  assert(grown.length === 4 && grown.every(p => p.leader >= 0), `after createPartitions to 4: ${JSON.stringify(grown)}`)
  assert((await admin.fetchTopicOffsets(topic)).length === 4, 'fetchTopicOffsets does not list 4 partitions')
  console.log('ok createPartitions 3 -> 4')

  // DeleteRecords v1: below offset 3 of partition 0, and everything of partition 1 (offset -1: the high watermark)
  producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, acks: -1, messages: [0, 1, 2, 3, 4].map(i => ({ partition: 0, value: `p0-${i}` })) })
  await producer.send({ topic, acks: -1, messages: [0, 1].map(i => ({ partition: 1, value: `p1-${i}` })) })
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '3' }] })
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 1, offset: '-1' }] })
  const after = Object.fromEntries((await admin.fetchTopicOffsets(topic)).map(o => [o.partition, [o.low, o.high]]))
  assert(JSON.stringify(after[0]) === '["3","5"]' && JSON.stringify(after[1]) === '["2","2"]',
    `[low, high] per partition after deleteTopicRecords: ${JSON.stringify(after)}`)
  console.log(`ok deleteTopicRecords: [low, high] ${JSON.stringify(after)}`)

  await admin.deleteTopics({ topics: [topic], timeout: 5000 })
  assert(!(await admin.listTopics()).includes(topic), `deleteTopics: ${topic} still listed`)
  try {
    await admin.fetchTopicMetadata({ topics: [topic] })
    throw new Error('fetchTopicMetadata of the deleted topic succeeded')
  } catch (e) {
    assert(e.type === 'UNKNOWN_TOPIC_OR_PARTITION', `metadata of the deleted topic: ${describeError(e)}`)
  }
  console.log('ok deleteTopics; its metadata -> UNKNOWN_TOPIC_OR_PARTITION')
}

run('kafkajs admin', main, {
  cleanup: async () => {
    if (producer) await producer.disconnect()
    await dropTopics(admin, [topic])
    await admin.disconnect()
  },
})
