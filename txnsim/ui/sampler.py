"""Samples a running cluster every interval from a thread of its own: node liveness, who owns which log,
and each partition's high watermark, last stable offset and the open transactions holding it back.

The page polls the latest sample and the history; nothing here decides anything for the cluster.
A node is `dead` when no process holds its lock, `paused` when it holds it but its heartbeat counter
has stood still for the cluster's session timeout (what the other nodes count it out on), else `up`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from client.cluster import ClusterClient
from client.transport import call
from coordinator.layout import ClusterLayout, ClusterSpec, node_layout, read_cluster_spec
from coordinator.membership import node_is_alive, read_heartbeat
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.observe.log_reader import read_ownership

log = logging.getLogger(__name__)

#: how many partition samples the picture over time keeps (at one a second: five minutes)
HISTORY = 300


@dataclass
class PartitionSample:
    time_ms: int
    high_watermark: int
    last_stable_offset: int
    #: producer id -> first offset of its open transaction (what holds the LSO back)
    open_transactions: dict[int, int] = field(default_factory=dict)
    #: the partition's leader, its replicas, the in-sync ones and those on brokers not live (Metadata's)
    leader: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()


class ClusterSampler:
    def __init__(self, layout: ClusterLayout, interval_s: float = 1.0, request_timeout_ms: int = 2_000) -> None:
        self.layout = layout
        self.spec: ClusterSpec = read_cluster_spec(layout)
        self.interval_s = interval_s
        self.admin = Admin(self.spec.bootstrap_servers, request_timeout_ms=request_timeout_ms)
        self._client = ClusterClient(self.spec.bootstrap_servers, request_timeout_ms=request_timeout_ms)
        self._timeout_s = request_timeout_ms / 1000
        self._lock = threading.Lock()
        self._beats: dict[int, tuple[int | None, float]] = {}
        self._history: dict[TopicPartition, deque[PartitionSample]] = {}
        self._cluster: dict[str, Any] = {"nodes": [], "logs": [], "changes": [], "error": ""}
        self._partitions_error = ""
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ui-sampler", daemon=True)

    def start(self) -> ClusterSampler:
        try:
            self.sample()
        except Exception:  # the page still serves and says what it cannot see; the thread tries again
            log.exception("sampling the cluster failed")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.admin.close()
        self._client.close()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # the page shows the last good sample; the next one may work
                log.exception("sampling the cluster failed")

    # ------------------------------------------------------------ sampling

    def sample(self) -> None:
        cluster = self._sample_cluster()
        with self._lock:
            self._cluster = cluster
        self._sample_partitions()

    def node_states(self) -> dict[int, str]:
        now = time.monotonic()
        timeout_s = self.spec.config.broker_session_timeout_ms / 1000
        states = {}
        for node_id in self.spec.node_ids:
            if not node_is_alive(node_layout(self.layout, self.spec, node_id), node_id):
                states[node_id] = "dead"
                self._beats.pop(node_id, None)
                continue
            if self.spec.replicated:  # its session lives in ZooKeeper, not in a heartbeat file: alive is up
                states[node_id] = "up"
                continue
            count = read_heartbeat(self.layout, node_id)
            seen, since = self._beats.get(node_id, (None, now))
            if count != seen or node_id not in self._beats:
                self._beats[node_id] = (count, now)
                states[node_id] = "up"
            else:
                states[node_id] = "paused" if now - since >= timeout_s else "up"
        return states

    def _sample_cluster(self) -> dict[str, Any]:
        states = self.node_states()
        logs: list[dict[str, Any]] = []
        errors = []
        for node_id, address in sorted(self.spec.nodes.items()):
            if states[node_id] != "up":
                continue
            try:
                status = call(self._client.stubs(address).cluster.Status, pb.ClusterStatusRequest(), self._timeout_s)
            except KafkaError as exc:
                errors.append(f"node {node_id}: {type(exc).__name__}")
                continue
            logs.extend({"topic": o.topic, "partition": o.partition, "node_id": node_id,
                         "leader_epoch": o.leader_epoch} for o in status.logs)
        changes = [asdict(c) for c in read_ownership(self.layout)[-200:]]
        nodes = [{"node_id": n, "address": self.spec.nodes[n], "state": states[n],
                  "owns": sum(1 for entry in logs if entry["node_id"] == n)} for n in self.spec.node_ids]
        return {"nodes": nodes, "logs": logs, "changes": changes[::-1], "error": "; ".join(errors),
                "txn_shards": self.spec.config.txn_shards, "offsets_shards": self.spec.config.offsets_shards}

    def _sample_partitions(self) -> None:
        now = int(time.time() * 1000)
        try:
            topics = self.admin.list_topics()
            tps = [TopicPartition(t, p) for t, n in sorted(topics.items()) for p in range(n)]
            lsos = self.admin.last_stable_offsets(tps)
            hws = self.admin.end_offsets(tps)
            placement = {TopicPartition(t.name, p.partition): p for t in self.admin.describe_cluster().topics
                         for p in t.partitions}
            samples = {}
            for tp, lso in lsos.items():
                sample = PartitionSample(now, max(hws.get(tp, lso), lso), lso)
                if (where := placement.get(tp)) is not None:
                    sample.leader, sample.replicas = where.leader, tuple(where.replicas)
                    sample.isr, sample.offline = tuple(where.isr), tuple(where.offline_replicas)
                if lso < sample.high_watermark:
                    try:
                        sample.open_transactions = {
                            p.producer_id: p.current_txn_start_offset for p in self.admin.describe_producers(tp)
                            if p.current_txn_start_offset >= 0}
                    except KafkaError:
                        pass
                samples[tp] = sample
            error = ""
        except KafkaError as exc:
            samples, error = {}, f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._partitions_error = error
            for tp, sample in samples.items():
                self._history.setdefault(tp, deque(maxlen=HISTORY)).append(sample)

    # ------------------------------------------------------------ what the page asks

    def cluster(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._cluster)

    def partitions(self) -> dict[str, Any]:
        with self._lock:
            history = {tp: list(samples) for tp, samples in self._history.items()}
            error = self._partitions_error
        out = []
        for tp, samples in sorted(history.items()):
            last = samples[-1]
            out.append({"topic": tp.topic, "partition": tp.partition, "high_watermark": last.high_watermark,
                        "last_stable_offset": last.last_stable_offset, "leader": last.leader,
                        "replicas": list(last.replicas), "isr": list(last.isr), "offline_replicas": list(last.offline),
                        "open_transactions": [{"producer_id": pid, "first_offset": first}
                                              for pid, first in sorted(last.open_transactions.items())],
                        "history": {"time_ms": [s.time_ms for s in samples],
                                    "high_watermark": [s.high_watermark for s in samples],
                                    "last_stable_offset": [s.last_stable_offset for s in samples],
                                    "open": [len(s.open_transactions) for s in samples]}})
        return {"partitions": out, "error": error}

