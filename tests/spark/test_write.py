"""The exactly-once sink in one Spark session: batch writes and a streaming copy through a task failure."""
from __future__ import annotations

import pytest
from pyspark import TaskContext
from pyspark.sql import functions as F

from tests.helpers import read_all
from tests.integration.test_transactions import read_values
from txnsim import Producer

SPARK_MASTER = "local[2,2]"  # maxFailures 2: a failed task is retried once


def test_a_batch_write_is_visible_at_once_with_keys_partitions_and_headers(spark, cluster, topic):
    bs = cluster.bootstrap_servers
    rows = (spark.range(2000)
            .selectExpr("cast(id as string) as value", "cast(id % 10 as string) as key",
                        "cast(id % 2 as int) as partition",
                        "array(named_struct('key', 'n', 'value', cast(cast(id as string) as binary))) as headers"))
    rows.write.format("txnsim").mode("append").option("bootstrap.servers", bs).option("topic", topic).save()
    records = read_all(bs, topic, partitions=2)  # visible on return: the commit waits for its markers
    assert sorted(int(r.value) for r in records) == list(range(2000))
    assert all(r.partition == int(r.value) % 2 for r in records)
    assert all(r.key == str(int(r.value) % 10).encode() for r in records)
    assert all(list(r.headers) == [("n", r.value)] for r in records)


INPUTS = [f"r{i}".encode() for i in range(20000)]
#: a row late in partition 1, so the dying attempt has written rows before it
DOOMED = b"r19001"


def copy_through(spark, admin, bs, topic, checkpoint, transform):
    """Fill `topic`-in with INPUTS, then copy it to `topic` through `transform` (a UDF) with availableNow."""
    source = topic + "-in"
    admin.create_topic(source, partitions=2)
    with Producer(bootstrap_servers=bs, transactional_id=source) as p:
        p.init_transactions()
        p.begin_transaction()
        for i, value in enumerate(INPUTS):
            p.send(source, value=value, partition=i % 2)
        p.commit_transaction()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")  # the sink sees rows in small steps
    try:
        query = (spark.readStream.format("txnsim").option("bootstrap.servers", bs).option("subscribe", source)
                 .option("startingOffsets", "earliest").load()
                 .select(transform("value").alias("value"))
                 .writeStream.format("txnsim").option("bootstrap.servers", bs).option("topic", topic)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def assert_copied_once_past_a_dead_attempt(bs, topic):
    assert sorted(read_values(bs, topic, "read_committed", partitions=2)) == sorted(INPUTS)
    # the dead attempt's records are in the log, aborted: the fencing was needed, not luck
    assert len(read_values(bs, topic, "read_uncommitted", partitions=2)) > len(INPUTS)


def test_a_streaming_copy_stays_exactly_once_when_a_task_fails_midway(spark, cluster, topic, admin, tmp_path):
    @F.udf("binary")
    def fail_once(value):
        if value == DOOMED and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("injected: the first attempt of this task dies midway")
        return value

    copy_through(spark, admin, cluster.bootstrap_servers, topic, tmp_path / "ckpt", fail_once)
    assert_copied_once_past_a_dead_attempt(cluster.bootstrap_servers, topic)


def test_the_at_least_once_baseline_writes_without_transactions_and_bad_options_say_which(spark, cluster, topic):
    from pyspark.errors.exceptions.captured import AnalysisException

    bs = cluster.bootstrap_servers
    rows = spark.range(100).selectExpr("cast(id as string) as value")
    (rows.write.format("txnsim").mode("append").option("bootstrap.servers", bs).option("topic", topic)
     .option("delivery.guarantee", "at-least-once").save())
    assert sorted(int(v) for v in read_values(bs, topic, "read_committed", partitions=2)) == list(range(100))
    with pytest.raises(AnalysisException, match="option 'delivery.guarantee' must be one of"):
        (rows.write.format("txnsim").mode("append").option("bootstrap.servers", bs).option("topic", topic)
         .option("delivery.guarantee", "twice").save())


def test_a_python_worker_killed_midway_leaves_its_rows_aborted_and_the_copy_exactly_once(spark, cluster, topic,
                                                                                      admin, tmp_path):
    """A real SIGKILL of a Python worker of the task (the UDF's) after the sink's attempt has written:
    the attempt ends without reporting, Spark retries the task, the dead attempt's rows are aborted."""
    @F.udf("binary")
    def die_once(value):
        import os
        import signal
        if value == DOOMED and TaskContext.get().attemptNumber() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return value

    copy_through(spark, admin, cluster.bootstrap_servers, topic, tmp_path / "ckpt", die_once)
    assert_copied_once_past_a_dead_attempt(cluster.bootstrap_servers, topic)
