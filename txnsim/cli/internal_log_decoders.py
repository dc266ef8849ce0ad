"""kafka-dump-log's --transaction-log-decoder and --offsets-decoder, for txnsim's own record formats:
one line per record of __transaction_state (transactional id -> its metadata) and __consumer_offsets
(committed offsets and group metadata). A null value is a tombstone, as in Kafka's compacted logs."""
from __future__ import annotations

from coordinator.group.log_format import GroupKey, decode_group, decode_offset, parse_key
from coordinator.txn.batch_metadata import BatchTxn
from coordinator.txn.state_log import decode_entry
from proto.errors import KafkaError
from proto.records import Record


def describe_transaction_log_record(r: Record) -> str:
    key = None if r.key is None else r.key.decode(errors="replace")
    head = f"| offset: {r.offset} key: transaction_metadata::transactionalId={key}"
    if r.value is None:
        return f"{head} payload: <DELETE>"
    try:
        value = decode_entry(key or "", r.value)
    except (KafkaError, ValueError) as exc:
        return f"{head} (not decodable: {exc})"
    if isinstance(value, BatchTxn):
        return (f"{head} payload: batchTransaction state={value.state} batchId={value.batch_id} "
                f"lastCommittedBatch={value.last_committed_batch} participants="
                f"{','.join(str(p.producer_id) for p in value.participants)} txnTimeoutMs={value.timeout_ms} "
                f"txnStartTimestamp={value.start_time_ms} txnLastUpdateTimestamp={value.last_update_time_ms}")
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(value.partitions))
    return (f"{head} payload: producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
            f"state={value.state},partitions=[{partitions}],txnLastUpdateTimestamp={value.last_update_time_ms},"
            f"txnStartTimestamp={value.start_time_ms},txnTimeoutMs={value.timeout_ms},"
            f"prevProducerId={value.previous_producer_id},nextProducerId={value.next_producer_id},"
            f"transactionVersion={value.transaction_version}")


def describe_offsets_record(r: Record) -> str:
    try:
        key = parse_key(r.key)
    except KafkaError as exc:
        return f"| offset: {r.offset} (not decodable: {exc})"
    if isinstance(key, GroupKey):
        head = f"| offset: {r.offset} key: group_metadata::group={key.group_id}"
        if r.value is None:
            return f"{head} payload: <DELETE>"
        try:
            group = decode_group(r.value)
        except (KafkaError, ValueError) as exc:
            return f"{head} (not decodable: {exc})"
        members = ",".join(f"{m.member_id}({m.client_id}@{m.client_host})" for m in group.members)
        return (f"{head} payload: {{protocolType:{group.protocol_type},protocol:{group.protocol_name},"
                f"generationId:{group.generation},leader:{group.leader_id},members:[{members}]}}")
    head = f"| offset: {r.offset} key: offset_commit::group={key.group_id},partition={key.tp.topic}-{key.tp.partition}"
    if r.value is None:
        return f"{head} payload: <DELETE>"
    try:
        committed = decode_offset(r.value, r.offset)
    except (KafkaError, ValueError) as exc:
        return f"{head} (not decodable: {exc})"
    return (f"{head} payload: offset={committed.offset} metadata={committed.metadata!r} "
            f"commitTimestamp={committed.commit_time_ms}")
