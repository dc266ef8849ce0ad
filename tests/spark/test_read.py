"""The txnsim source read by Spark: batch and streaming reads see exactly the committed records.

The first tests check the planning arithmetic and option parsing without Spark; one reads a
range straight from a real 3-node cluster; the rest run real queries on a local SparkSession
(start-up ~10 s, each query a few seconds), so there are few of them and each checks several things.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from proto.errors import KafkaConfigurationError, KafkaTimeoutError, OffsetOutOfRangeError
from proto.structs import RecordMetadata, TopicPartition
from spark.offsets import (
    OffsetRange,
    PartitionBounds,
    check_progress,
    offsets_from_json,
    plan_batch,
    plan_ranges,
    rate_limit,
)
from spark.partition_reader import read_range
from spark.read_options import EARLIEST, OffsetSpec, ReadOptions
from spark.reader import kafka_schema
from txnsim import Producer

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
BASE = {"bootstrap.servers": "127.0.0.1:7001", "subscribe": "t"}


# ---------------------------------------------------------------- planning, without Spark

def test_rate_limit_shares_the_cap_in_proportion_to_what_each_partition_has():
    # 90 and 10 offsets available: 20 are shared 18 / 2
    assert rate_limit(20, {T0: 0, T1: 100}, {T0: 90, T1: 110}, {}) == {T0: 18, T1: 102}
    # a share below one offset rounds up, so a small partition is never starved
    assert rate_limit(10, {T0: 0, T1: 0}, {T0: 1000, T1: 1}, {}) == {T0: 9, T1: 1}
    # a partition new since `start` counts from its log start; nothing available means no cap
    assert rate_limit(4, {T0: 5}, {T0: 5, T1: 12}, {T1: 10}) == {T0: 5, T1: 12}
    assert rate_limit(4, {T0: 5}, {T0: 5}, {}) == {T0: 5}


def test_micro_batch_ranges_depend_only_on_start_and_end():
    assert plan_ranges({T0: 3, T1: 7}, {T0: 3, T1: 7}) == []  # Spark always plans the first batch
    assert plan_ranges({T0: 3}, {T0: 9, T1: 4}) == [OffsetRange(T0, 3, 9), OffsetRange(T1, EARLIEST, 4)]
    assert plan_ranges({T0: 3}, {T0: 3, T1: 0}) == []  # a new, empty partition
    assert offsets_from_json({"t": {"1": 4, "0": 9}}) == {T0: 9, T1: 4}


def test_a_start_below_the_log_start_is_data_loss_unless_failondataloss_is_false():
    bounds = {T0: PartitionBounds(log_start_offset=5, end_offset=20)}
    starting = OffsetSpec("startingOffsets", None, ((T0, 2),))
    latest = OffsetSpec("endingOffsets", -1)
    with pytest.raises(OffsetOutOfRangeError, match=r"\[OFFSET_OUT_OF_RANGE\] startingOffsets 2 of t-0 is below "
                                                    r"the log start offset 5.*failOnDataLoss=false"):
        plan_batch(starting, latest, bounds, fail_on_data_loss=True)
    assert plan_batch(starting, latest, bounds, fail_on_data_loss=False) == [OffsetRange(T0, 5, 20)]
    with pytest.raises(OffsetOutOfRangeError, match="endingOffsets asks for t-0 up to 25"):
        plan_batch(starting, OffsetSpec("endingOffsets", None, ((T0, 25),)), bounds, fail_on_data_loss=False)


def test_a_stream_whose_readable_end_goes_back_reports_data_loss():
    with pytest.raises(OffsetOutOfRangeError, match=r"readable end of t-1 went back from 9 to 4"):
        check_progress({T0: 3, T1: 9}, {T0: 5, T1: 4}, fail_on_data_loss=True)
    check_progress({T0: 3, T1: 9}, {T0: 5, T1: 4}, fail_on_data_loss=False)  # logged; the stream goes on


@pytest.mark.parametrize("options, streaming, named", [
    ({"subscribe": "t"}, False, "'bootstrap.servers' is required"),
    ({**BASE, "bootstrap.servers": "localhost"}, False, "'bootstrap.servers' must be 'host:port"),
    ({"bootstrap.servers": "h:1"}, False, "exactly one of the options 'subscribe'"),
    ({**BASE, "assign": '{"t": [0]}'}, False, "got 'subscribe', 'assign'"),
    ({**BASE, "subscribe": None, "assign": '{"t": 0}'}, False, "option 'assign' must map each topic"),
    ({**BASE, "subscribe": None, "subscribePattern": "t("}, False, "'subscribePattern' is not a valid regex"),
    ({**BASE, "startingOffsets": "newest"}, True, "option 'startingOffsets' must be 'earliest', 'latest' or JSON"),
    ({**BASE, "startingOffsets": '{"t": {"0": "x"}}'}, True, "option 'startingOffsets': 't' partition '0'"),
    ({**BASE, "startingOffsets": '{"u": {"0": 1}}'}, True, "names partitions that subscribe=['t'] does not read"),
    ({**BASE, "startingOffsets": "latest"}, False, "'startingOffsets' cannot be 'latest' in a batch query"),
    ({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, False, "'endingOffsets': offset -2 (earliest)"),
    ({**BASE, "endingOffsets": "latest"}, True, "'endingOffsets' is not valid in a streaming query"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be a positive integer"),
    ({**BASE, "isolation.level": "serializable"}, False, "'isolation.level' must be 'read_committed' or"),
    ({**BASE, "failOnDataLoss": "yes"}, False, "'failOnDataLoss' must be 'true' or 'false'"),
    ({**BASE, "includeHeaders": "1"}, True, "'includeHeaders' must be 'true' or 'false'"),
])
def test_a_bad_option_is_rejected_with_its_name(options, streaming, named):
    with pytest.raises(KafkaConfigurationError, match=named.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        ReadOptions.parse({k: v for k, v in options.items() if v is not None}, streaming=streaming)


def test_options_are_case_insensitive_and_accept_spark_kafka_spellings():
    options = ReadOptions.parse({"KAFKA.bootstrap.servers": "h:1", "Subscribe": "a, b,a", "STARTINGOFFSETS":
                                 '{"a": {"0": -2}, "b": {"0": 7}}', "kafka.isolation.level": "READ_UNCOMMITTED"},
                                streaming=True)
    assert options.bootstrap_servers == "h:1"
    assert options.subscription.topics == ("a", "b")
    assert options.starting_offsets.offset_for(TopicPartition("b", 0)) == 7
    assert not options.reads_committed


# ---------------------------------------------------------------- a real cluster

@contextmanager
def transaction(bs: str, txn_id: str, *, commit: bool | None = True) -> Iterator[TxnSender]:
    """A transaction that commits (True), aborts (False) or stays open (None) until the block ends."""
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sender = TxnSender(producer)
        if commit is None:
            try:
                yield sender
            finally:
                producer.abort_transaction()
            return
        yield sender
        producer.commit_transaction() if commit else producer.abort_transaction()


class TxnSender:
    """Sends records into one transaction, waits for each, and remembers where they landed."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sent: list[tuple[RecordMetadata, bytes]] = []

    def send(self, topic: str, partition: int, *values: str, **kwargs) -> TxnSender:
        for value in values:
            meta = self.producer.send(topic, value=value.encode(), partition=partition, **kwargs).get(timeout=10)
            self.sent.append((meta, value.encode()))
        return self


def test_a_range_the_log_cannot_fill_fails_at_its_deadline_instead_of_hanging(cluster, topic):
    with transaction(cluster.bootstrap_servers, f"{topic}-a") as txn:
        txn.send(topic, 0, "only")
    options = ReadOptions.parse({"bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic,
                                 "kafkaConsumer.pollTimeoutMs": "300"}, streaming=False)
    schema = to_arrow_schema(kafka_schema({"bootstrap.servers": "h:1", "subscribe": topic}), timezone="UTC")
    rows = read_range(options, schema, OffsetRange(TopicPartition(topic, 0), 0, 2))  # the record and its marker
    assert [b.num_rows for b in rows] == [1]
    with pytest.raises(KafkaTimeoutError, match=rf"reading {topic}-0 \[0, 50\) made no progress for 0.3 s at "
                                                 r"offset 2"):
        list(read_range(options, schema, OffsetRange(TopicPartition(topic, 0), 0, 50)))


# ---------------------------------------------------------------- Spark: batch reads

def rows_of(df) -> set[tuple[int, int, bytes]]:
    return {(r.partition, r.offset, bytes(r.value)) for r in df.collect()}


def expected(*senders: TxnSender) -> set[tuple[int, int, bytes]]:
    return {(m.partition, m.offset, v) for s in senders for m, v in s.sent}


def batch_read(spark, bs: str, topic: str, **options):
    """spark.read of `topic` (by subscribe, unless the options choose another way)."""
    if not {"subscribePattern", "assign"} & set(options):
        options["subscribe"] = topic
    reader = spark.read.format("txnsim").option("bootstrap.servers", bs)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.mark.slow
def test_batch_read_committed_holds_back_open_transactions_and_hides_aborted_ones(spark, cluster, topic):
    bs = cluster.bootstrap_servers
    with transaction(bs, f"{topic}-a") as first:
        first.send(topic, 0, "c0", "c1").send(topic, 1, "c2")
    with transaction(bs, f"{topic}-b", commit=False) as aborted:
        aborted.send(topic, 0, "x0").send(topic, 1, "x1")
    with transaction(bs, f"{topic}-o", commit=None) as still_open:
        still_open.send(topic, 0, "open0")
        with transaction(bs, f"{topic}-c") as later:
            later.send(topic, 0, "late0").send(topic, 1, "late1")

        committed = batch_read(spark, bs, topic)
        assert committed.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        # partition 0 stops at the open transaction (its LSO), so late0 is held back with it
        late1 = {row for row in expected(later) if row[0] == 1}
        assert rows_of(committed) == expected(first) | late1
        row = committed.where("partition = 1").orderBy("offset").first()
        assert (row.topic, row.timestampType, row.timestamp is not None) == (topic, 0, True)

        everything = rows_of(batch_read(spark, bs, topic, **{"isolation.level": "read_uncommitted"}))
        assert everything == expected(first, aborted, still_open, later)


@pytest.mark.slow
def test_batch_read_by_pattern_between_json_offsets_with_headers(spark, cluster, topic):
    bs = cluster.bootstrap_servers
    with transaction(bs, f"{topic}-a") as txn:
        for i in range(5):
            txn.send(topic, 0, f"h{i}", headers=[("n", str(i).encode())])
        txn.send(topic, 1, "p0", "p1", "p2")
    df = batch_read(spark, bs, topic, includeHeaders="true", subscribePattern=re.escape(topic[:-3]) + ".{3}",
                    startingOffsets=f'{{"{topic}": {{"0": 1, "1": -2}}}}',
                    endingOffsets=f'{{"{topic}": {{"0": 3, "1": -1}}}}')
    rows = {(r.partition, r.offset): r for r in df.collect()}
    assert sorted(rows) == [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [(h.key, bytes(h.value)) for h in rows[(0, 2)].headers] == [("n", b"2")]
    assert rows[(1, 0)].headers is None  # as Spark's Kafka source: no headers is NULL


@pytest.mark.slow
def test_load_reports_bad_options_and_unknown_topics_clearly_and_an_empty_topic_reads_empty(spark, cluster, topic):
    with pytest.raises(Exception, match=r"option 'bootstrap.servers' is required"):
        spark.read.format("txnsim").option("subscribe", "t").load()  # at load(), as Spark's Kafka source
    with pytest.raises(Exception, match=r"\[UNKNOWN_TOPIC_OR_PARTITION\] topic 'no-such-topic' does not exist"):
        batch_read(spark, cluster.bootstrap_servers, "no-such-topic").collect()
    assert batch_read(spark, cluster.bootstrap_servers, topic, assign=json.dumps({topic: [0, 1]})).count() == 0


# ---------------------------------------------------------------- Spark: streaming reads

def run_available_now(spark, bs: str, topic: str, checkpoint: str,
                      **options) -> tuple[list[tuple[int, list]], dict[str, dict[str, int]]]:
    """One Trigger.AvailableNow run: (batch id, rows) per micro-batch that had rows, and the end offsets."""
    batches: list[tuple[int, list]] = []
    reader = (spark.readStream.format("txnsim").option("bootstrap.servers", bs).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load().writeStream
             .foreachBatch(lambda df, batch_id: batches.append((batch_id, df.collect())))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(timeout=180), "the available-now query did not finish"
        assert query.exception() is None, query.exception()
        end_offset = json.loads(query.lastProgress["sources"][0]["endOffset"])
    finally:
        query.stop()
    return [(b, rows) for b, rows in batches if rows], end_offset


def streamed(batches: Sequence[tuple[int, list]]) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for _b, rows in batches for r in rows)


@pytest.mark.slow
def test_stream_reads_each_committed_row_once_and_resumes_when_an_open_transaction_ends(spark, cluster, topic,
                                                                                         tmp_path):
    bs, checkpoint = cluster.bootstrap_servers, str(tmp_path / "checkpoint")
    with transaction(bs, f"{topic}-a") as first:
        first.send(topic, 0, "a0", "a1").send(topic, 1, "a2")
    with transaction(bs, f"{topic}-b", commit=False) as aborted:
        aborted.send(topic, 0, "x0")
    with Producer(bootstrap_servers=bs, transactional_id=f"{topic}-o") as open_producer:
        open_producer.init_transactions()
        open_producer.begin_transaction()
        held = TxnSender(open_producer).send(topic, 1, "o1")
        with transaction(bs, f"{topic}-c") as later:
            later.send(topic, 0, "b0").send(topic, 1, "b1")

        before, end = run_available_now(spark, bs, topic, checkpoint)
        behind_open = {row for row in expected(later) if row[0] == 1}
        assert streamed(before) == sorted(expected(first, later) - behind_open)
        # offsets are {"topic": {"partition": next offset}}; partition 1 stopped at the open transaction
        assert end == {topic: {"0": 7, "1": held.sent[0][0].offset}}

        open_producer.commit_transaction()
    after, _end = run_available_now(spark, bs, topic, checkpoint)  # restarts from the checkpoint's offsets
    assert streamed(after) == sorted(expected(held) | behind_open)


@pytest.mark.slow
def test_max_offsets_per_trigger_splits_a_backlog_into_bounded_micro_batches(spark, cluster, topic, tmp_path):
    bs = cluster.bootstrap_servers
    senders = []
    for t in range(3):
        with transaction(bs, f"{topic}-{t}") as txn:
            txn.send(topic, 0, *(f"{t}-{i}" for i in range(6))).send(topic, 1, *(f"{t}-{i}" for i in range(6, 10)))
        senders.append(txn)
    # 30 committed records (and 6 commit markers), at most 8 offsets per micro-batch
    batches, end = run_available_now(spark, bs, topic, str(tmp_path / "checkpoint"), maxOffsetsPerTrigger="8")
    assert end == {topic: {"0": 21, "1": 15}}
    assert len(batches) >= 4
    assert all(len(rows) <= 8 for _b, rows in batches)
    assert streamed(batches) == sorted(expected(*senders))
