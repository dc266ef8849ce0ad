"""The exactly-once sink: tasks write inside one batch transaction, the driver decides it once.

Each task attempt joins the batch transaction of (query, batch id) as a participant with its
own producer id, writes its rows, and reports that id in its commit message. Spark's
`commit` (in a process that rebuilt this writer from the options: messages are the only
channel) names the reported participants as winners in one EndBatchTxn; every other attempt
(failed, retried, speculative, or from a run the driver did not survive) is aborted by the
coordinator. A replayed batch id that committed before finds the batch committed at join and
writes nothing; a repeated `commit` is a no-op. docs/spark-exactly-once.md has every window.
"""
from __future__ import annotations

import logging
import os
import signal
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from client.cluster import ClusterClient
from producer import Producer
from producer.batch_participant import BatchParticipant, end_batch_transaction
from spark.write_options import WriteOptions

log = logging.getLogger(__name__)

NO_PRODUCER = -1


@dataclass
class TaskCommit(WriterCommitMessage):
    """What one successful task attempt tells the driver (must pickle: plain fields only)."""

    batch_txn_id: str
    batch_id: int
    task: int
    attempt: int
    producer_id: int  # NO_PRODUCER: the task wrote nothing (no rows, or the batch had committed before)
    records: int


class BatchWriter(DataSourceArrowWriter):
    """df.write.format("txnsim").mode("append"): the whole write is one batch transaction."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("the txnsim sink only appends: use .mode(\"append\")")
        self.options = WriteOptions.parse(options, schema)
        # made once on the driver and pickled to every task, so all of them join the same batch
        self.batch_txn_id = f"{self.options.transactional_id_prefix}write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        return write_task_share(self.options, self.batch_txn_id, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        end_batch(self.options, messages, 0, committed=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        end_batch(self.options, messages, 0, committed=False)


class StreamWriter(DataSourceStreamArrowWriter):
    """writeStream.format("txnsim"): one batch transaction per micro-batch, keyed by the query id."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.options = WriteOptions.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context else None
        query_id = context.getLocalProperty("sql.streaming.queryId") if context else None  # stable across restarts
        if batch_id is None or query_id is None:
            raise RuntimeError("StreamWriter.write runs only in a task of a streaming query (no batch or query id)")
        return write_task_share(self.options, self.options.transactional_id_prefix + query_id, int(batch_id),
                                iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's)
        end_batch(self.options, messages, batchId, committed=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        end_batch(self.options, messages, batchId, committed=False)


# ---------------------------------------------------------------- task side


def write_task_share(options: WriteOptions, batch_txn_id: str, batch_id: int,
                     iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
    """Write this task attempt's rows as a participant of the batch; join only once a row exists."""
    context = TaskContext.get()
    task, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
    if options.delivery_guarantee == "at-least-once":
        return _write_at_least_once(options, batch_txn_id, batch_id, task, attempt, iterator)
    participant: BatchParticipant | None = None
    records = 0
    finished = False
    try:
        for arrow_batch in iterator:
            if arrow_batch.num_rows == 0:
                continue
            if participant is None:
                participant = BatchParticipant(
                    bootstrap_servers=options.bootstrap_servers, transactional_id=batch_txn_id,
                    transaction_timeout_ms=options.transaction_timeout_ms, max_block_ms=options.max_block_ms,
                    linger_ms=5)
                if not participant.join(batch_id, task=task, attempt=attempt):
                    break  # a replay of a batch that committed before: write nothing
            records += _send_rows(participant, options, arrow_batch)
        if participant is None or records == 0:
            return TaskCommit(batch_txn_id, batch_id, task, attempt, NO_PRODUCER, 0)
        participant.finish()
        finished = True
        producer_id = participant.producer_id_and_epoch[0]
        log.info("batch %d of %s: task %d attempt %d wrote %d records as producer %d", batch_id, batch_txn_id,
                 task, attempt, records, producer_id)
        return TaskCommit(batch_txn_id, batch_id, task, attempt, producer_id, records)
    finally:
        if participant is not None:  # a failed attempt drops what it has not sent: it will be aborted
            participant.close(timeout=None if finished or records == 0 else 0)


def _write_at_least_once(options: WriteOptions, batch_txn_id: str, batch_id: int, task: int, attempt: int,
                         iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
    """Spark's Kafka sink's guarantee: an idempotent producer, no transaction; retries may duplicate."""
    records = 0
    producer: Producer | None = None
    try:
        for arrow_batch in iterator:
            if arrow_batch.num_rows == 0:
                continue
            if producer is None:
                producer = Producer(bootstrap_servers=options.bootstrap_servers, max_block_ms=options.max_block_ms,
                                    linger_ms=5)
            records += _send_rows(producer, options, arrow_batch)
        if producer is not None:
            producer.flush()
    finally:
        if producer is not None:
            producer.close()
    return TaskCommit(batch_txn_id, batch_id, task, attempt, NO_PRODUCER, records)


def _send_rows(producer: Producer, options: WriteOptions, batch: pa.RecordBatch) -> int:
    columns = batch.schema.names
    values = _as_bytes(batch.column(columns.index("value")).to_pylist())
    count = len(values)
    keys = _as_bytes(batch.column(columns.index("key")).to_pylist()) if options.has_key else [None] * count
    if options.topic is not None:
        topics = [options.topic] * count
    else:
        topics = batch.column(columns.index("topic")).to_pylist()
    partitions = (batch.column(columns.index("partition")).to_pylist() if options.has_partition
                  else [None] * count)
    headers = (batch.column(columns.index("headers")).to_pylist() if options.has_headers else [None] * count)
    send = producer.send
    for value, key, topic, partition, header_list in zip(values, keys, topics, partitions, headers):
        if topic is None:
            raise ValueError("a row has a null 'topic' and no 'topic' option is set")
        send(topic, value=value, key=key, partition=partition,
             headers=None if not header_list else [(h["key"], _one_bytes(h["value"])) for h in header_list])
    return count


def _as_bytes(column: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in column]


def _one_bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


# ---------------------------------------------------------------- driver side


def end_batch(options: WriteOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int, *,
              committed: bool) -> None:
    """Commit (naming the attempts that reported success) or abort one batch; idempotent. The messages are
    the TaskCommits that write() returned (None for a task that failed)."""
    if options.delivery_guarantee == "at-least-once":
        return  # every record was acknowledged when written: nothing to decide
    reports = [m for m in messages if isinstance(m, TaskCommit)]
    if not reports:
        log.info("batch %d: no task reported, nothing to %s", batch_id, "commit" if committed else "abort")
        return
    batch_txn_id = reports[0].batch_txn_id
    winners = [m.producer_id for m in reports if m.producer_id != NO_PRODUCER]
    client = ClusterClient(options.bootstrap_servers)
    try:
        outcome = end_batch_transaction(client, batch_txn_id, batch_id, committed=committed, winners=winners,
                                        timeout_s=options.max_block_ms / 1000)
    finally:
        client.close()
    if outcome.repeated_commit:
        log.info("batch %d of %s had committed before: nothing done", batch_id, batch_txn_id)
    else:
        log.info("batch %d of %s %s: %d records from %d tasks", batch_id, batch_txn_id,
                 "committed" if committed else "aborted", sum(m.records for m in reports), len(winners))
    if committed and options.kill_driver_after_batch == batch_id:
        _crash_driver_after_commit(batch_id)


#: set by spark.jobs: the process group of the driver (its JVM and Python workers inherit it; Spark's
#: Python workers run in process groups of their own, so the commit cannot take its own)
DRIVER_PROCESS_GROUP = "TXNSIM_DRIVER_PGID"


def _crash_driver_after_commit(batch_id: int) -> None:
    """The write option txnsim.fault.killDriverAfterBatch (fault injection on purpose): SIGKILL the driver's
    whole process group now that this batch's commit is durable and visible, before Spark's commit log."""
    group = os.environ.get(DRIVER_PROCESS_GROUP)
    if not group:
        log.warning("fault injection asked to kill the driver after batch %d, but it was not started by "
                    "spark.jobs (no process group to kill)", batch_id)
        return
    log.warning("fault injection: killing the driver (process group %s) after committing batch %d", group, batch_id)
    os.killpg(int(group), signal.SIGKILL)
