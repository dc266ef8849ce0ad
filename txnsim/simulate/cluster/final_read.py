"""The final checks of the cluster model: once the run has settled, one more node opens every log on the
simulated disk and reads what the cluster left, as a user would, and what the clients were told is held
against it.

Read back: every data partition read_committed (for `txnsim chaos`'s checker), the copiers' committed
offsets from `__consumer_offsets`, the half shards' three logs with the node's own replay, and the input
topic read_uncommitted. Checked here: no transaction left hanging, each Spark-style batch whole and once, the
half messages' delivery, and every record handed to the read_uncommitted reader still where it was.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from consumer.fetcher import PartitionRecords
from coordinator.group import snapshots as group_snapshots
from coordinator.rocketmq.log_format import MESSAGE_ID, decode_half
from coordinator.rocketmq.shard_load import load_half_shard
from partitions import LogConfig, LogManager, PartitionLog
from partitions.storage import Storage
from proto.planted_bugs import PlantedBug
from proto.structs import (
    CHECK_MAX_TOPIC,
    CONSUMER_OFFSETS_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    ConsumerRecord,
    IsolationLevel,
    TopicPartition,
)
from txnsim.chaos.history import FinalRead, Observed
from txnsim.simulate.cluster.batch_client import TASKS
from txnsim.simulate.cluster.copier import COPY_GROUP
from txnsim.simulate.cluster.node import DATA_ROOT, SEGMENT_BYTES
from txnsim.simulate.cluster.rmq_client import COMMITTED
from txnsim.simulate.cluster.shape import (
    CHECK_INTERVAL_MS,
    CHECK_MAX,
    HALF_SHARDS,
    OFFSETS_SHARDS,
    RMQ_PARTITIONS,
    RMQ_TOPICS,
)
from txnsim.simulate.model import Violation


def open_reader(disk: Storage, node_id: int, planted_bug: PlantedBug | None, now_ms: Callable[[], int]) -> LogManager:
    """The node that reads the disk after the run (`node_id` none of the cluster's), with the one planted bug
    of the log it should share."""
    config = LogConfig(segment_bytes=SEGMENT_BYTES, planted_bug=planted_bug)
    return LogManager(DATA_ROOT, config, node_id=node_id, storage=disk, now_ms=now_ms)


def read_topics(reader: LogManager, partitions: Iterable[TopicPartition],
                now_ms: int) -> tuple[FinalRead, list[Violation]]:
    """Every partition read_committed, the copiers' committed offsets, and the partitions left hanging."""
    final = FinalRead()
    found: list[Violation] = []
    for tp in partitions:
        log = open_read_only(reader, tp)
        if log is None:
            continue
        if log.last_stable_offset < log.high_watermark:
            found.append(Violation("no-hanging-transaction", f"{tp}: LSO {log.last_stable_offset} < HW "
                                   f"{log.high_watermark} after the run settled: a transaction hangs"))
        final.records.setdefault(tp.topic, []).extend(Observed.of(r) for r in read(log, tp))
    for shard in range(OFFSETS_SHARDS):
        log = open_read_only(reader, TopicPartition(CONSUMER_OFFSETS_TOPIC, shard))
        if log is None:
            continue
        contents = group_snapshots.restore(log, shard, now_ms)  # segments below a snapshot may be gone
        group = contents.groups.get(COPY_GROUP)
        if group is not None:
            final.committed.update({tp: value.offset for tp, value in group.offsets.items()})
    return final, found


def batch_violations(records: list[Observed]) -> list[Violation]:
    """From the final read of the batch topic: which attempts of each (batch, task) are visible."""
    attempts: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if r.writer and r.writer.startswith("spark/"):
            _, batch, task, attempt = r.writer.split("/")
            attempts.setdefault((batch, task), set()).add(attempt)
    found = [Violation("batch-exactly-once", f"batch {batch} task {task}: attempts {sorted(seen)} are all visible")
             for (batch, task), seen in sorted(attempts.items()) if len(seen) > 1]
    tasks: dict[str, set[str]] = {}
    for batch, task in attempts:
        tasks.setdefault(batch, set()).add(task)
    found.extend(Violation("batch-atomic", f"batch {batch}: only tasks {sorted(seen)} of {TASKS} are visible")
                 for batch, seen in sorted(tasks.items()) if len(seen) != TASKS)
    return found


def half_message_violations(reader: LogManager, sent: Sequence[str], local: Mapping[str, str]) -> list[Violation]:
    """Every half message decided (or discarded) and copied; those whose local transaction (`local`: message id
    -> its state in the producers' database) committed on their real topic exactly once, the others never."""
    found: list[Violation] = []
    delivered: Counter[str] = Counter()
    for tp in (TopicPartition(topic, p) for topic in RMQ_TOPICS for p in range(RMQ_PARTITIONS)):
        log = open_read_only(reader, tp)
        if log is None:
            continue
        if log.last_stable_offset < log.high_watermark:
            found.append(Violation("no-hanging-transaction", f"{tp}: LSO {log.last_stable_offset} < HW "
                                   f"{log.high_watermark} after the run settled: a message stored in place "
                                   "was never ended"))
        for record in read(log, tp):
            delivered[(dict(record.headers).get(MESSAGE_ID) or b"").decode()] += 1
    discarded: set[str] = set()
    for shard in range(HALF_SHARDS):
        half_log, op_log, discard_log = (open_read_only(reader, TopicPartition(t, shard))
                                         for t in (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC))
        if half_log is None or op_log is None or discard_log is None:
            continue
        core = load_half_shard(shard, CHECK_INTERVAL_MS, CHECK_MAX, half_log, op_log, discard_log)
        for batch in discard_log.batches():
            discarded.update(decode_half(record).message_id for record in batch.records())
        for pending in core.pending.values():
            found.append(Violation("rmq-undecided-resolved", f"{pending.transaction_id} (message "
                                   f"{pending.record.message_id}) is still undecided after the run settled, "
                                   f"checked {pending.record.check_times} times"))
        for decision in core.unfinished.values():
            found.append(Violation("rmq-undecided-resolved", f"{decision.transaction_id} (message "
                                   f"{decision.record.message_id}) still owes its copy after the run settled"))
    for message_id in sent:
        state, count = local.get(message_id), delivered.get(message_id, 0)
        if state == COMMITTED:
            if count > 1 or (count == 0 and message_id not in discarded):
                found.append(Violation("rmq-committed-delivered-once", f"message {message_id} committed its "
                                       f"local transaction but is on its topic {count} times"
                                       f"{'' if count else ' and not in the discard log'}"))
        elif count:
            found.append(Violation("rmq-rollback-never-delivered", f"message {message_id}'s local transaction "
                                   f"is {state or 'never run'}, yet it is on its topic {count} times"))
    return found


def uncommitted_read_violations(reader: LogManager, partitions: Iterable[TopicPartition],
                                handed: Mapping[tuple[TopicPartition, int], bytes | None]) -> list[Violation]:
    """Every record handed to the read_uncommitted reader (`handed`: (partition, offset) -> value) is in the
    log as it was, read from the disk."""
    final: dict[tuple[TopicPartition, int], bytes | None] = {}
    for tp in partitions:
        log = open_read_only(reader, tp)
        if log is not None:
            final.update(((tp, r.offset), r.value) for r in read(log, tp, IsolationLevel.READ_UNCOMMITTED))
    missing = [(key, value) for key, value in handed.items() if final.get(key, b"-") != value]
    return [Violation("uncommitted-read-durable",
                      f"{len(missing)} records handed to the read_uncommitted reader are not in the log as they "
                      f"were after the run settled; e.g. {tp}@{offset} value {value!r}, the log holds "
                      f"{final.get((tp, offset), 'nothing')!r} there")
            for (tp, offset), value in missing[:1]]


def open_read_only(reader: LogManager, tp: TopicPartition) -> PartitionLog | None:
    """The partition's log as the reading node holds it (opened, and so claimed, the first time: every node
    has stopped), or None if nobody ever created it."""
    log = reader.get(tp.topic, tp.partition)
    if log is not None:
        return log
    if not reader.storage.exists(PurePosixPath(DATA_ROOT / f"{tp.topic}-{tp.partition}")):
        return None
    return reader.open_as_leader(tp.topic, tp.partition, lambda node_id: True)


def read(log: PartitionLog, tp: TopicPartition,
         isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> list[ConsumerRecord]:
    """Every record of `log` a consumer at `isolation` is handed, as the consumer's own fetcher filters them."""
    data = log.read(0, 1 << 30, isolation)
    return PartitionRecords(tp, 0, data.records, isolation_level=isolation,
                            aborted_transactions=data.aborted_transactions).take(1 << 30)
