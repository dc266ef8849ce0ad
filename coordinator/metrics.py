"""A node's Prometheus metrics: the metric objects, the scrape-time gauges, and the /metrics server.

Counters and histograms move when a driver reports an event (coordinator/observers.py); gauges of
current state (open transactions, LSO lag, owned logs, undecided half messages) are read from the
node at scrape time, so they can never drift from what the node holds. Each node has its own
CollectorRegistry, so several nodes in one process (tests) do not share numbers.
Where a node serves them is written to DATA/nodes/<id>.metrics (`txnsim cluster status` prints it).
"""
from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proto.errors import KafkaConfigurationError
from proto.structs import CONSUMER_OFFSETS_TOPIC, HALF_MESSAGE_TOPICS, TRANSACTION_STATE_TOPIC, TopicPartition

if TYPE_CHECKING:
    from coordinator.rocketmq.log_format import HalfRecord

log = logging.getLogger(__name__)

#: seconds; a commit takes a few ms on a quiet machine, seconds while a partition owner fails over
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def log_kind(topic: str) -> str:
    """The `log` label: which kind of log a topic is (a bounded set, unlike topic names)."""
    if topic == TRANSACTION_STATE_TOPIC:
        return "transaction_state"
    if topic == CONSUMER_OFFSETS_TOPIC:
        return "consumer_offsets"
    if topic in HALF_MESSAGE_TOPICS:
        return "half_messages"
    return "data"


class OpenLog(Protocol):
    """What the scrape reads of each log the node leads (partitions.PartitionLog)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...


@dataclass(frozen=True)
class NodeState:
    """How the scrape reads the node's current state."""

    #: transaction state name -> how many ids of the owned shards are in it (Ongoing, Prepare*)
    open_transactions: Callable[[], Mapping[str, int]]
    open_logs: Callable[[], Iterable[OpenLog]]
    undecided_half_messages: Callable[[], int]
    #: (partition, follower, records it has yet to fetch) of every partition this node leads (a replicated cluster)
    follower_lags: Callable[[], Iterable[tuple[TopicPartition, int, int]]] = lambda: ()
    #: (partition, log end) of every replica this node holds, leading or following (a replicated cluster)
    replica_log_ends: Callable[[], Iterable[tuple[TopicPartition, int]]] = lambda: ()


class NodeMetrics:
    """Every metric of one node; implements each observer interface of coordinator/observers.py."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._started = Counter(
            "txnsim_transactions_started", "Transactions begun on this node's transaction shards (the first "
            "AddPartitionsToTxn or AddOffsetsToTxn of a transaction, durable)", registry=r)
        self._committed = Counter(
            "txnsim_transactions_committed", "Transactions completed with COMMIT (CompleteCommit durable: "
            "every partition has its marker)", registry=r)
        self._aborted = Counter(
            "txnsim_transactions_aborted", "Transactions completed with ABORT (CompleteAbort durable), "
            "timed-out and fenced ones included", registry=r)
        self._timed_out = Counter(
            "txnsim_transactions_timed_out", "Transactions the coordinator aborted because they stayed open "
            "longer than their transaction.timeout.ms (PrepareAbort durable)", registry=r)
        self._commit_latency = Histogram(
            "txnsim_transaction_commit_latency_seconds", "From EndTxn(commit) received to the commit complete "
            "(every marker acknowledged and CompleteCommit durable), on the node that received the EndTxn",
            buckets=LATENCY_BUCKETS, registry=r)
        self._end_txn_latency = Histogram(
            "txnsim_end_txn_latency_seconds", "From EndTxn received to its answer without error (PrepareCommit "
            "or PrepareAbort durable: the outcome is decided); result: commit or abort",
            ["result"], buckets=LATENCY_BUCKETS, registry=r)
        self._marker_retries = Counter(
            "txnsim_txn_marker_retries", "COMMIT/ABORT markers a partition owner did not acknowledge, sent "
            "again after a backoff", registry=r)
        self._marker_request_producers = Histogram(
            "txnsim_txn_marker_request_producers", "Producers (transactions) whose markers one WriteTxnMarkers "
            "request of this node carried: markers owed to a node while a request to it is out share the next; "
            "_count is the requests sent", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self._ownership_changes = Counter(
            "txnsim_ownership_changes", "Logs this node took (acquired), gave up (released) or was fenced out "
            "of; log: transaction_state, consumer_offsets, half_messages or data",
            ["action", "log"], registry=r)
        self._snapshots = Counter(
            "txnsim_shard_snapshots", "Snapshots this node wrote of the coordinator shards it owns (loading then "
            "replays only the log after the newest); log: transaction_state or consumer_offsets", ["log"], registry=r)
        self._rebalances = Counter(
            "txnsim_group_rebalances", "Consumer group join phases completed (a new generation of a group "
            "on this node's offsets shards)", registry=r)
        self._offsets_committed = Counter(
            "txnsim_group_offsets_committed", "Partition offsets that became a group's committed offsets on this "
            "node (a durable OffsetCommit, a transaction's COMMIT marker, a shard loaded)", registry=r)
        self._checks_sent = Counter(
            "txnsim_rocketmq_check_backs_sent", "RocketMQ check-backs of undecided half messages handed to a "
            "live producer of their group", registry=r)
        self._checks_resolved = Counter(
            "txnsim_rocketmq_check_backs_resolved", "Half messages decided by a producer's answer to a "
            "check-back; resolution: commit or rollback", ["resolution"], registry=r)
        self._discarded = Counter(
            "txnsim_rocketmq_half_messages_discarded", "Half messages still undecided after "
            "transaction_check_max check-backs, discarded (never delivered)", registry=r)
        for result in ("commit", "abort"):
            self._end_txn_latency.labels(result=result)
        for resolution in ("commit", "rollback"):
            self._checks_resolved.labels(resolution=resolution)
        self._server: WSGIServer | None = None

    def watch(self, state: NodeState) -> None:
        """Serve the gauges of the node's current state, read at each scrape."""
        self.registry.register(_StateCollector(state))

    # ------------------------------------------------------------ observer interfaces

    def transaction_started(self) -> None:
        self._started.inc()

    def transaction_completed(self, committed: bool) -> None:
        (self._committed if committed else self._aborted).inc()

    def transaction_timed_out(self) -> None:
        self._timed_out.inc()

    def end_txn_answered(self, committed: bool, seconds: float) -> None:
        self._end_txn_latency.labels(result="commit" if committed else "abort").observe(seconds)

    def commit_completed(self, seconds: float) -> None:
        self._commit_latency.observe(seconds)

    def markers_resent(self, count: int) -> None:
        self._marker_retries.inc(count)

    def shard_snapshotted(self, topic: str, shard: int, next_offset: int, log_start_offset: int) -> None:
        self._snapshots.labels(log=log_kind(topic)).inc()

    def marker_request_sent(self, producers: int) -> None:
        self._marker_request_producers.observe(producers)

    def group_rebalanced(self) -> None:
        self._rebalances.inc()

    def offsets_committed(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._offsets_committed.inc(len(offsets))

    def check_back_sent(self, transaction_id: str, record: HalfRecord, via_peer: bool) -> None:
        self._checks_sent.inc()

    def check_back_resolved(self, committed: bool) -> None:
        self._checks_resolved.labels(resolution="commit" if committed else "rollback").inc()

    def half_message_discarded(self, transaction_id: str) -> None:
        self._discarded.inc()

    def ownership_changed(self, action: str, topic: str, partition: int, leader_epoch: int) -> None:
        self._ownership_changes.labels(action=action, log=log_kind(topic)).inc()

    # ------------------------------------------------------------ serving

    def serve(self, host: str, port: int) -> str:
        """Serve /metrics on host:port (0: a free port) from a daemon thread; returns its URL."""
        try:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise KafkaConfigurationError(f"cannot serve metrics on {host}:{port} ({exc.strerror}); choose another "
                                          "port (--metrics-port N; 0 picks a free one)") from None
        return f"http://{host}:{self._server.server_port}/metrics"

    def stop(self) -> None:
        """Stop serving and free the port, in the background: the server notices within its 0.5 s poll,
        and a stopping node need not wait for that."""
        server, self._server = self._server, None
        if server is not None:
            def close() -> None:
                server.shutdown()
                server.server_close()
            threading.Thread(target=close, name="metrics-stop", daemon=True).start()


class _StateCollector(Collector):
    def __init__(self, state: NodeState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        open_txns = GaugeMetricFamily(
            "txnsim_transactions_open", "Transactional ids of this node's shards in a transaction: Ongoing, or "
            "PrepareCommit/PrepareAbort (decided, markers being written)", labels=["state"])
        counts = self._state.open_transactions()
        for state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
            open_txns.add_metric([state], counts.get(state, 0))
        yield open_txns
        lag = GaugeMetricFamily(
            "txnsim_partition_last_stable_offset_lag", "High watermark minus last stable offset of each data "
            "partition this node leads: records held back from read_committed consumers by open transactions",
            labels=["topic", "partition"])
        hw = GaugeMetricFamily("txnsim_partition_high_watermark", "High watermark of each data partition this "
                               "node leads (the end of its durable log)", labels=["topic", "partition"])
        lso = GaugeMetricFamily("txnsim_partition_last_stable_offset", "Last stable offset of each data partition "
                                "this node leads (read_committed consumers read up to it)",
                                labels=["topic", "partition"])
        owned = GaugeMetricFamily("txnsim_owned_logs", "Logs this node leads, by kind of log", labels=["log"])
        kinds: Tally[str] = Tally()
        for open_log in sorted(self._state.open_logs(), key=lambda lg: (lg.topic, lg.partition)):
            kind = log_kind(open_log.topic)
            kinds[kind] += 1
            if kind != "data":
                continue
            labels = [open_log.topic, str(open_log.partition)]
            high, stable = open_log.high_watermark, open_log.last_stable_offset
            hw.add_metric(labels, high)
            lso.add_metric(labels, stable)
            lag.add_metric(labels, high - stable)
        for kind in ("transaction_state", "consumer_offsets", "half_messages", "data"):
            owned.add_metric([kind], kinds[kind])
        yield from (lag, hw, lso, owned)
        followers = GaugeMetricFamily(
            "txnsim_replica_follower_lag_records", "Records a follower of a partition this node leads has yet to "
            "fetch: the leader's log end minus the follower's (a replicated cluster)",
            labels=["topic", "partition", "follower"])
        for tp, follower, behind in self._state.follower_lags():
            followers.add_metric([tp.topic, str(tp.partition), str(follower)], behind)
        yield followers
        ends = GaugeMetricFamily("txnsim_replica_log_end_offset", "Log end of every replica this node holds, "
                                 "leading or following (a replicated cluster)", labels=["topic", "partition"])
        for tp, end in self._state.replica_log_ends():
            ends.add_metric([tp.topic, str(tp.partition)], end)
        yield ends
        yield GaugeMetricFamily("txnsim_rocketmq_half_messages_undecided", "Half messages on this node's shards "
                                "awaiting their producer's decision or a check-back",
                                value=self._state.undecided_half_messages())


# ------------------------------------------------------------ where a node serves them

def metrics_file(nodes_dir: Path, node_id: int) -> Path:
    return nodes_dir / f"{node_id}.metrics"


def write_metrics_url(nodes_dir: Path, node_id: int, url: str) -> None:
    """Record the URL for `txnsim cluster status`; a small file replaced whole, so a reader sees all or nothing."""
    path = metrics_file(nodes_dir, node_id)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(url + "\n")
    tmp.replace(path)


def read_metrics_url(nodes_dir: Path, node_id: int) -> str | None:
    """The URL the node wrote when it last started, or None (never started, or a version without metrics)."""
    try:
        return metrics_file(nodes_dir, node_id).read_text().strip() or None
    except OSError:
        return None
