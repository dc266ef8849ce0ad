"""Several batches of a partition in flight (Kafka's idempotent producer allows 5), on real node processes:
a batch that overtakes an unanswered predecessor is refused with OUT_OF_ORDER_SEQUENCE and resent after it,
retries keep the order, and every acknowledged record is in the log exactly once, in send order."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from proto import records
from tests.helpers import leader_of, read_all, wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import Admin, LocalCluster, Producer, errors

PAUSE_SETTINGS = dict(FAST_SETTINGS, broker_session_timeout_ms=1000)
PAD = b"x" * 92


def log_bytes(cluster: LocalCluster, topic: str, partition: int = 0) -> bytes:
    directory = cluster.data_dir / "logs" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_batches_pipelined_into_a_split_stay_in_order(tmp_path):
    """Batches too large for the node (MESSAGE_TOO_LARGE) travel with others of their partition; each is
    split and resent in halves, the others after them, so every record lands once, in send order."""
    with LocalCluster(nodes=1, data_dir=tmp_path, txn_shards=2, offsets_shards=1, message_max_bytes=2_000) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("small", partitions=1)
        values = [b"%03d" % i + b"x" * 97 for i in range(80)]
        with Producer(bootstrap_servers=bs, linger_ms=60_000, batch_size=4_000) as producer:
            first = producer.send("small", value=values[0], partition=0)
            producer.flush(timeout=10)  # the epoch's first batch goes alone: after it, batches travel together
            futures = [first] + [producer.send("small", value=v, partition=0) for v in values[1:]]
            producer.flush(timeout=20)
            assert [f.get(timeout=10).offset for f in futures] == list(range(80))
        stored = [b for b in records.iter_batches(log_bytes(cluster, "small")) if not b.header.is_control]
        sequences = [(b.header.base_sequence, b.header.last_sequence) for b in stored]
        assert sequences == sorted(sequences) and all(b.header.size <= 2_000 for b in stored)
        assert [r.value for r in read_all(bs, "small", partitions=1, isolation_level="read_uncommitted")] == values


class Pipeline:
    """An idempotent producer writing numbered 100-byte values to one partition in bursts of `burst`, a
    `pace_s` apart, never waiting for an answer: each burst leaves in a request of its own, so requests of
    the partition pile up in flight (up to five)."""

    def __init__(self, bs: str, partition: int, burst: int, pace_s: float, **settings: object) -> None:
        self.partition = partition
        self.burst, self.pace_s = burst, pace_s
        self.sent: list = []
        self.stop = threading.Event()
        self._producer = Producer(bootstrap_servers=bs, **settings)
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        send, i = self._producer.send, 0
        while not self.stop.is_set():
            for _ in range(self.burst):
                self.sent.append(send("t", value=b"%08d" % i + PAD, partition=self.partition))
                i += 1
            time.sleep(self.pace_s)  # the workload's pace, not a wait for anything

    def acknowledged(self) -> int:
        return sum(1 for f in list(self.sent) if f.succeeded())

    def finish(self) -> tuple[list[int], list[BaseException]]:
        """Stop, flush, close; the values acknowledged and the errors of the others."""
        self.stop.set()
        self._thread.join(timeout=60)
        self._producer.flush(timeout=60)
        self._producer.close()
        acknowledged, errors_ = [], []
        for value, future in enumerate(self.sent):
            if future.succeeded():
                acknowledged.append(value)
            else:
                errors_.append(future.exception)
        return acknowledged, errors_


def partition_values(bs: str, partition: int) -> list[int]:
    return [int(r.value[:8]) for r in read_all(bs, "t", partitions=3, isolation_level="read_uncommitted")
            if r.partition == partition]


@pytest.mark.slow
def test_requests_that_a_stalled_leader_takes_out_of_order_are_resent_in_order(tmp_path, caplog):
    """The partition's leader stalls (SIGSTOP, well inside its session) while requests of one partition pile
    up in flight; when it wakes, its threads take them in no particular order, and a batch that overtakes its
    predecessor is refused with OUT_OF_ORDER_SEQUENCE and resent after it. The log holds each value once,
    in send order, and every value is acknowledged."""
    caplog.set_level(logging.DEBUG, logger="producer.sender")
    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", **FAST_SETTINGS) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("t", partitions=3)
        leader = leader_of(bs, "t", 0)
        # a burst of 5 fills one 600-byte batch, which the sender sends as soon as it is full
        pipeline = Pipeline(bs, 0, burst=5, pace_s=0.002, batch_size=600, linger_ms=1, request_timeout_ms=10_000)

        def overtaken() -> bool:
            return any("overtook an unanswered batch" in r.getMessage() for r in caplog.records)

        try:
            for _stall in range(40):  # each stall gives the node's threads a pile of requests to race for
                progress = pipeline.acknowledged()
                cluster.pause(leader)
                wait_until(lambda: len(pipeline.sent) >= progress + 100, timeout_s=10,
                           what="records sent while the leader stalls")
                cluster.resume(leader)
                wait_until(lambda: pipeline.acknowledged() > progress + 100, timeout_s=20,
                           what="the woken leader to acknowledge them")
                if overtaken():
                    break
        finally:
            cluster.resume(leader)
            acknowledged, failures = pipeline.finish()
        assert overtaken(), "no request was taken out of order in 40 stalls"
        assert not failures
        assert partition_values(bs, 0) == acknowledged == list(range(len(acknowledged)))


@pytest.fixture
def pause_cluster(tmp_path):
    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", **PAUSE_SETTINGS) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=3)
        yield c


@pytest.mark.slow
def test_batches_in_flight_when_their_leader_is_paused_land_once_and_in_order_on_the_new_one(pause_cluster):
    """Small batches keep up to five of a partition in flight; the partition's leader is paused mid-stream, the
    batches it held time out and are resent to the new leader, the woken leader is fenced. Per partition the
    log holds each value once, in send order, with no gap, and every acknowledged value is there."""
    cluster = pause_cluster
    bs = cluster.bootstrap_servers
    leader = leader_of(bs, "t", 1)
    acknowledged: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        with Producer(bootstrap_servers=bs, linger_ms=1, batch_size=600, request_timeout_ms=1000,
                      delivery_timeout_ms=30_000) as producer:
            i = 0
            while not stop.is_set():
                window = [(i + k, producer.send("t", value=b"%08d" % (i + k) + PAD, partition=1)) for k in range(40)]
                for value, future in window:  # 40 records of 100 bytes: eight batches, five in flight at once
                    try:
                        future.get(timeout=30)
                    except errors.KafkaError as exc:
                        failures.append(exc)
                        return
                    acknowledged.append(value)
                i += len(window)

    writer = threading.Thread(target=write)
    writer.start()
    wait_until(lambda: len(acknowledged) >= 400, what="some acknowledged writes")
    cluster.pause(leader)
    count_at_pause = len(acknowledged)
    wait_until(lambda: len(acknowledged) >= count_at_pause + 400, timeout_s=20,
               what="writes to continue on the new leader")
    cluster.resume(leader)
    wait_until(lambda: len(acknowledged) >= count_at_pause + 800, timeout_s=20, what="writes after the wake-up")
    stop.set()
    writer.join(timeout=60)
    assert not writer.is_alive() and not failures
    values = partition_values(bs, 1)
    assert values == list(range(len(values)))  # no gap, no duplicate, in order
    assert set(acknowledged) <= set(values)


def test_a_hundred_thousand_records_flat_out_are_all_acknowledged_once_in_order(tmp_path):
    """Requests of one producer to a node are started in order and their answers handled in arrival order: a
    session that made Produce calls from a pool of threads lost 0.4-4% of 100,000 records to
    OUT_OF_ORDER_SEQUENCE (a batch refused for overtaking its predecessor, whose success was handled first)."""
    with LocalCluster(nodes=3, data_dir=tmp_path, **FAST_SETTINGS) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("flat-out", partitions=4)
        with Producer(bootstrap_servers=bs) as producer:
            futures = [producer.send("flat-out", value=b"%d" % i, partition=i % 4) for i in range(100_000)]
            producer.flush(timeout=60)
        failed = [f.exception for f in futures if f.failed()]
        assert failed == []
        for partition in range(4):
            offsets = [f.get(timeout=1).offset for f in futures[partition::4]]
            assert offsets == list(range(25_000))
