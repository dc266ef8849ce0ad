"""The timeline builder on real log bytes: __transaction_state and data partitions written by real PartitionLogs
(as the coordinator and the partition leaders write them), read back by the reader beside the builder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.config import NodeConfig
from coordinator.layout import ClusterLayout, ClusterSpec, write_cluster_spec
from coordinator.txn import state_log
from coordinator.txn.metadata import TxnMetadata
from partitions import PartitionLog
from proto import records
from proto.hashing import partition_for
from proto.structs import TRANSACTION_STATE_TOPIC, TopicPartition, TransactionState
from txnsim.observe.log_reader import browse, read_ownership, read_state_entries, timeline_of
from txnsim.observe.timeline import build_timeline, lanes, last_transactions

S = TransactionState
TID = "payments-1"
SHARDS = 4
T0 = 1_700_000_000_000
ORDERS = [TopicPartition("orders", 0), TopicPartition("orders", 1)]


class Cluster:
    """A data directory as nodes leave it: a cluster file, logs, an ownership log."""

    def __init__(self, root: Path) -> None:
        self.layout = ClusterLayout(root)
        write_cluster_spec(self.layout, ClusterSpec({0: "127.0.0.1:1", 1: "127.0.0.1:2"},
                                                    NodeConfig.from_settings({"txn_shards": SHARDS})))
        self.shard = partition_for(TID, SHARDS)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self.lead(TRANSACTION_STATE_TOPIC, self.shard, node=0, epoch=0, at=T0 - 100)
        for tp in ORDERS:
            self.lead(tp.topic, tp.partition, node=1, epoch=0, at=T0 - 100)

    def lead(self, topic: str, partition: int, *, node: int, epoch: int, at: int, reason: str = "start-up") -> None:
        """`node` takes the log over at leader epoch `epoch` (the old leader's log object is closed)."""
        old = self._logs.pop((topic, partition), None)
        if old is not None:
            old.close()
        self._logs[(topic, partition)] = PartitionLog.open(self.layout.logs / f"{topic}-{partition}", topic,
                                                          partition, leader_epoch=epoch)
        with open(self.layout.metadata / "ownership.log", "a") as f:
            f.write(json.dumps({"time_ms": at, "node_id": node, "action": "acquired", "topic": topic,
                                "partition": partition, "leader_epoch": epoch, "reason": reason}) + "\n")

    def state(self, meta: TxnMetadata, at: int) -> TxnMetadata:
        state_log.append_entry(self._logs[(TRANSACTION_STATE_TOPIC, self.shard)], TID, meta, at)
        return meta

    def produce(self, tp: TopicPartition, pid: int, epoch: int, seq: int, at: int, *values: bytes) -> None:
        batch = records.encode_batch([(at, b"k", v, (("h", b"1"),)) for v in values], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=seq, transactional=True)
        self._logs[(tp.topic, tp.partition)].append(batch, verified_producer_ids=frozenset({pid}))

    def marker(self, tp: TopicPartition, pid: int, epoch: int, committed: bool, at: int) -> None:
        self._logs[(tp.topic, tp.partition)].append_marker(producer_id=pid, producer_epoch=epoch, committed=committed,
                                                           coordinator_epoch=0, timestamp_ms=at)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def begin(c: Cluster, pid: int = 5, timeout_ms: int = 60_000) -> TxnMetadata:
    """InitProducerId, then a transaction on both partitions with one batch each."""
    meta = c.state(TxnMetadata(TID, pid, 0, timeout_ms, S.EMPTY, last_update_time_ms=T0), T0)
    for i, tp in enumerate(ORDERS):
        c.produce(tp, pid, 0, 0, T0 + 10 + i, b"v%d" % i)
    return c.state(meta.transit(S.ONGOING, T0 + 20, partitions=frozenset(ORDERS), start_time_ms=T0 + 10), T0 + 20)


def test_a_commit_across_two_partitions_step_by_step(cluster):
    ongoing = begin(cluster)
    prepare = cluster.state(ongoing.transit(S.PREPARE_COMMIT, T0 + 50, producer_epoch=1), T0 + 50)
    cluster.marker(ORDERS[1], 5, 1, True, T0 + 60)
    cluster.marker(ORDERS[0], 5, 1, True, T0 + 61)
    cluster.state(prepare.transit(S.COMPLETE_COMMIT, T0 + 70), T0 + 70)
    events = timeline_of(cluster.layout.root, TID)
    assert [(e.time_ms - T0, e.lane, e.kind) for e in events] == [
        (0, "node 0", "InitProducerId"),
        (10, "orders-0", "Produce"),
        (11, "orders-1", "Produce"),
        (20, "node 0", "AddPartitions"),
        (50, "node 0", "EndTxn"),
        (50, "node 0", "Prepare"),
        (60, "orders-1", "Marker"),
        (60, "orders-1", "MarkerAck"),
        (61, "orders-0", "Marker"),
        (61, "orders-0", "MarkerAck"),
        (70, "node 0", "Complete"),
    ]
    assert events[4].label == "EndTxn(commit)" and events[5].label == "PrepareCommit written"
    assert events[6].label == "COMMIT marker at offset 1" and events[6].node_id == 1
    assert lanes(events) == ["node 0", "orders-0", "orders-1"]


def test_a_timeout_is_marked_and_the_abort_markers_follow(cluster):
    ongoing = begin(cluster, timeout_ms=100)
    fence = ongoing.transit(S.PREPARE_EPOCH_FENCE, T0 + 300, producer_epoch=1, ended_by_fence=True)
    prepare = cluster.state(fence.transit(S.PREPARE_ABORT, T0 + 300), T0 + 300)
    for tp in ORDERS:
        cluster.marker(tp, 5, 1, False, T0 + 310)
    cluster.state(prepare.transit(S.COMPLETE_ABORT, T0 + 320), T0 + 320)
    kinds = [(e.kind, e.label) for e in timeline_of(cluster.layout.root, TID) if e.time_ms >= T0 + 300]
    assert kinds[0] == ("Timeout", "timed out after 100 ms: fenced at epoch 1")
    assert ("Prepare", "PrepareAbort written") in kinds
    assert [label for kind, label in kinds if kind == "Marker"] == ["ABORT marker at offset 1"] * 2
    assert kinds[-1] == ("Complete", "CompleteAbort written")


def test_a_new_instance_fences_an_open_transaction(cluster):
    ongoing = begin(cluster)
    fence = ongoing.transit(S.PREPARE_EPOCH_FENCE, T0 + 40, producer_epoch=1, ended_by_fence=True)
    prepare = cluster.state(fence.transit(S.PREPARE_ABORT, T0 + 40), T0 + 40)
    done = cluster.state(prepare.transit(S.COMPLETE_ABORT, T0 + 45), T0 + 45)
    cluster.state(done.transit(S.EMPTY, T0 + 50, producer_epoch=2), T0 + 50)
    kinds = [e.kind for e in timeline_of(cluster.layout.root, TID) if e.time_ms >= T0 + 40]
    assert kinds == ["Fence", "Prepare", "Complete", "InitProducerId"]


def test_a_failover_between_prepare_and_complete_puts_each_write_in_its_writers_lane(cluster):
    ongoing = begin(cluster)
    prepare = cluster.state(ongoing.transit(S.PREPARE_COMMIT, T0 + 50, producer_epoch=1), T0 + 50)
    cluster.lead(TRANSACTION_STATE_TOPIC, cluster.shard, node=1, epoch=1, at=T0 + 55, reason="live nodes [0, 1] -> [1]")
    for tp in ORDERS:
        cluster.marker(tp, 5, 1, True, T0 + 60)
    cluster.state(prepare.transit(S.COMPLETE_COMMIT, T0 + 70), T0 + 70)
    events = timeline_of(cluster.layout.root, TID)
    failover = [e for e in events if e.kind == "Failover"]
    assert [(f.lane, f.label, f.detail) for f in failover] == [
        ("node 1", f"acquired txn shard {cluster.shard} (leader epoch 1)", "live nodes [0, 1] -> [1]")]
    assert [e.lane for e in events if e.kind == "Prepare"] == ["node 0"]
    assert [e.lane for e in events if e.kind == "Complete"] == ["node 1"]


def test_other_producers_batches_and_other_ids_entries_stay_out(cluster):
    begin(cluster)
    cluster.produce(ORDERS[0], 99, 0, 0, T0 + 30, b"someone else")
    state_log.append_entry(cluster._logs[(TRANSACTION_STATE_TOPIC, cluster.shard)], "other-id",
                           TxnMetadata("other-id", 99, 0, 1000), T0 + 30)
    shard, entries = read_state_entries(cluster.layout, TID)
    assert shard == cluster.shard and [e.value.state for e in entries if e.value] == [S.EMPTY, S.ONGOING]
    events = build_timeline(TID, shard, entries, [], read_ownership(cluster.layout))
    assert [e.kind for e in events] == ["InitProducerId", "AddPartitions"]
    assert all(e.producer_epoch == 0 for e in timeline_of(cluster.layout.root, TID))


def test_an_unknown_id_has_no_timeline(cluster):
    assert timeline_of(cluster.layout.root, "never-used") == []


def test_browsing_a_partition_shows_each_records_transaction_outcome(cluster):
    ongoing = begin(cluster)
    cluster.marker(ORDERS[0], 5, 1, True, T0 + 60)
    cluster.produce(ORDERS[0], 6, 0, 0, T0 + 70, b"undecided")
    cluster.state(ongoing, T0 + 70)  # unchanged: only the data matters here
    seen = browse(cluster.layout.root, ORDERS[0])
    assert [(r.offset, r.value, r.transaction, r.headers) for r in seen] == [
        (0, b"v0", "committed", (("h", b"1"),)), (2, b"undecided", "open", (("h", b"1"),))]
    assert [r.offset for r in browse(cluster.layout.root, ORDERS[0], start_offset=1)] == [2]


def txnsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txnsim.cli.main", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "200"}, cwd=Path(__file__).resolve().parents[3])


@pytest.mark.slow
def test_the_timeline_command_prints_the_steps_and_json(cluster):
    ongoing = begin(cluster)
    prepare = cluster.state(ongoing.transit(S.PREPARE_COMMIT, T0 + 50, producer_epoch=1), T0 + 50)
    for tp in ORDERS:
        cluster.marker(tp, 5, 1, True, T0 + 60)
    cluster.state(prepare.transit(S.COMPLETE_COMMIT, T0 + 70), T0 + 70)
    data_dir = str(cluster.layout.root)
    shown = txnsim("transactions", "timeline", TID, "--data-dir", data_dir)
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "│" in line]
    assert "InitProducerId: producer 5 epoch 0" in lines[0]
    assert "PrepareCommit written" in shown.stdout and "markers owed to orders-0, orders-1" in shown.stdout
    assert sum("COMMIT marker at offset 1" in line for line in lines) == 2
    assert "CompleteCommit written" in lines[-1]
    as_json = txnsim("transactions", "timeline", TID, "--data-dir", data_dir, "--json")
    events = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and [e["kind"] for e in events].count("Marker") == 2
    assert events[0] == {"time_ms": T0, "lane": "node 0", "kind": "InitProducerId",
                         "label": "InitProducerId: producer 5 epoch 0", "node_id": 0, "producer_epoch": 0,
                         "detail": "timeout 60000 ms", "transaction": 1, "generation": 0}
    assert {e["lane"] for e in events if e["kind"] == "Marker"} == {"orders-0", "orders-1"}


@pytest.mark.slow
def test_the_timeline_command_names_an_unknown_id_in_one_line(cluster, tmp_path):
    unknown = txnsim("transactions", "timeline", "never-used", "--data-dir", str(cluster.layout.root))
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        f"error: TransactionalIdNotFoundError: [TRANSACTIONAL_ID_NOT_FOUND] no durable record of transactional id "
        f"'never-used' in {cluster.layout.root}"]
    nowhere = txnsim("transactions", "timeline", TID, "--data-dir", str(tmp_path / "nothing"))
    assert nowhere.returncode == 1 and len(nowhere.stderr.strip().splitlines()) == 1
    assert "no cluster at" in nowhere.stderr


def test_last_transactions_keeps_each_transactions_own_steps(cluster):
    meta = begin(cluster)
    for n in range(3):
        prepare = cluster.state(meta.transit(S.PREPARE_COMMIT, T0 + 100 * n + 50, producer_epoch=n + 1),
                                T0 + 100 * n + 50)
        done = cluster.state(prepare.transit(S.COMPLETE_COMMIT, T0 + 100 * n + 60), T0 + 100 * n + 60)
        meta = cluster.state(done.transit(S.ONGOING, T0 + 100 * n + 70, partitions=frozenset(ORDERS[:1]),
                                          start_time_ms=T0 + 100 * n + 70), T0 + 100 * n + 70)
        cluster.produce(ORDERS[0], 5, n + 1, 0, T0 + 100 * n + 55, b"next")  # before the last one completes
    events = timeline_of(cluster.layout.root, TID)
    assert [e.transaction for e in events if e.kind == "Produce"] == [1, 1, 2, 3, 4]
    assert [(e.kind, e.transaction) for e in last_transactions(events, 2)] == [
        ("Produce", 3), ("AddPartitions", 3), ("EndTxn", 3), ("Prepare", 3), ("Produce", 4), ("Complete", 3),
        ("AddPartitions", 4)]
    assert [e.kind for e in last_transactions(events, 1)] == ["Produce", "AddPartitions"]
    assert last_transactions(events, 5) == events


def test_the_pages_timelines_are_read_again_exactly_when_their_files_change(cluster):
    from txnsim.ui.queries import Timelines
    timelines = Timelines(cluster.layout.root)
    ongoing = begin(cluster)
    first = timelines(TID)
    assert [e["kind"] for e in first["events"]][-1] == "AddPartitions"
    assert timelines(TID)["events"] == first["events"]
    assert timelines._picture(TID) is timelines._picture(TID), "unchanged files: not read again"
    assert timelines(TID, last=0)["events"] == [] and timelines(TID, last=0)["left_out"] == len(first["events"])
    prepare = cluster.state(ongoing.transit(S.PREPARE_COMMIT, T0 + 50, producer_epoch=1), T0 + 50)
    cluster.marker(ORDERS[0], 5, 1, True, T0 + 60)
    assert [e["kind"] for e in timelines(TID)["events"]][-2:] == ["Marker", "MarkerAck"]
    cluster.marker(ORDERS[1], 5, 1, True, T0 + 61)  # a data partition's file alone changed
    assert [e["lane"] for e in timelines(TID)["events"] if e["kind"] == "Marker"] == ["orders-0", "orders-1"]
    cluster.state(prepare.transit(S.COMPLETE_COMMIT, T0 + 70), T0 + 70)
    assert timelines(TID)["events"][-1]["kind"] == "Complete"
