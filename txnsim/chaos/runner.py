"""One chaos run from start to verdict: cluster, topics, workload and nemesis, healing, drain,
the final read_committed read, and the check.

The final read happens only after every node is healed and no transaction is open on either
topic (last stable offset = high watermark), so what it misses was lost, not merely late.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumer import Consumer
from proto.errors import KafkaConfigurationError, KafkaError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.chaos.checker import CheckResult, check
from txnsim.chaos.history import FinalRead, History, Observed
from txnsim.chaos.nemesis import NETWORK_FAULTS, Fault, Nemesis, plan_faults
from txnsim.chaos.workload import CONSUMER_SETTINGS, Generator, Worker, WorkloadSettings
from txnsim.cluster import LocalCluster
from txnsim.ownership import OwnershipChange, read_ownership_changes

#: node settings of the embedded cluster: a transaction left open by a killed client is
#: aborted by its coordinator within seconds, so the final read is not held up for long
CLUSTER_SETTINGS: dict[str, Any] = dict(txn_shards=16, offsets_shards=8,
                        transaction_abort_timed_out_transaction_cleanup_interval_ms=1_000)


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    duration_s: float = 60.0
    nodes: int = 3
    seed: int = 0
    faults: tuple[str, ...] = ("kill", "pause")
    fault_interval_ms: int = 3_000
    #: a node stays down (killed or paused) for this long, drawn uniformly
    down_ms: tuple[int, int] = (1_000, 2_000)
    abort_ratio: float = 0.1
    partitions: int = 3
    workers: int = 2
    records: int | None = None
    data_dir: Path | None = None
    #: after the faults: how long the workers may take to copy what is left, and the final read
    drain_timeout_s: float = 90.0
    #: the cluster's shape: three replicas of every log, acks=all with min.insync.replicas 2, a controller on
    #: ZooKeeper; `namespaces`: that, each node and the ZooKeeper on a host of its own (the network faults
    #: need it); `unclean_leader_election`: Kafka's unclean.leader.election.enable on
    replicated: bool = False
    namespaces: bool = False
    unclean_leader_election: bool = False

    def validate(self) -> None:
        if self.workers < 1 or self.partitions < 1 or self.nodes < 1:
            raise KafkaConfigurationError("a chaos run needs at least one node, one partition and one worker")
        if self.duration_s <= 0:
            raise KafkaConfigurationError(f"the duration must be positive, not {self.duration_s}")
        network = sorted(set(self.faults) & set(NETWORK_FAULTS))
        if network and not self.namespaces:
            raise KafkaConfigurationError(f"{' and '.join(network)} faults cut links between hosts: run on hosts of "
                                          "their own (--namespaces)")
        if self.unclean_leader_election and not (self.replicated or self.namespaces):
            raise KafkaConfigurationError("unclean leader election picks among replicas: run a replicated cluster "
                                          "(--replicated or --namespaces)")
        if self.data_dir is not None and (Path(self.data_dir) / "cluster.json").exists():
            raise KafkaConfigurationError(f"{self.data_dir} already holds a cluster; a chaos run needs an empty "
                                          "--data-dir")

    def schedule(self, node_ids: Sequence[int] | None = None) -> list[Fault]:
        nodes = list(node_ids) if node_ids is not None else list(range(self.nodes))
        return plan_faults(self.seed, self.duration_s, nodes, self.faults, self.fault_interval_ms / 1000,
                           (self.down_ms[0] / 1000, self.down_ms[1] / 1000))


@dataclass(slots=True)
class ChaosRun:
    config: ChaosConfig
    schedule: list[Fault]
    history: History
    final: FinalRead = field(default_factory=FinalRead)
    result: CheckResult | None = None
    #: workers had copied every committed input record before the final read
    drained: bool = False
    #: time.monotonic() (the history's clock) and time.time() when the workload and the faults started
    started_at: float | None = None
    started_wall_s: float | None = None
    #: every ownership change of the cluster's logs, read from its ownership log at the end
    ownership: list[OwnershipChange] = field(default_factory=list)


class Observer:
    """What a display learns while a run goes on (all no-ops here)."""

    def started(self, run: ChaosRun, bootstrap_servers: str, data_dir: Path) -> None: ...
    def phase(self, name: str) -> None: ...
    def tick(self, elapsed_s: float, counters: dict[str, int], nodes_down: dict[int, str]) -> None: ...


def run_chaos(config: ChaosConfig, observer: Observer | None = None) -> ChaosRun:
    observer = observer or Observer()
    config.validate()
    cluster = LocalCluster(nodes=config.nodes, data_dir=config.data_dir, **cluster_settings(config))  # None: temp
    run = ChaosRun(config, config.schedule(), History())
    with cluster:
        _run_on(cluster, run, observer)
        run.ownership = read_ownership_changes(cluster.layout.metadata, run.started_wall_s or 0.0)
    return run


def cluster_settings(config: ChaosConfig) -> dict[str, Any]:
    """The embedded cluster's settings; a replicated one's leaders move within a fault's length (a 2 s
    session, followers out of the ISR after 3 s) and acks=all needs two in-sync replicas."""
    if not (config.replicated or config.namespaces):
        return dict(CLUSTER_SETTINGS)
    return {**CLUSTER_SETTINGS, "replicated": True, "namespaces": config.namespaces,
            "zookeeper_session_timeout_ms": 2_000, "replica_lag_time_max_ms": 3_000,
            "min_insync_replicas": min(2, config.nodes), "leader_imbalance_check_interval_seconds": 5,
            "unclean_leader_election_enable": config.unclean_leader_election}


def _run_on(cluster: LocalCluster, run: ChaosRun, observer: Observer) -> None:
    config, history = run.config, run.history
    bs = cluster.bootstrap_servers
    settings = WorkloadSettings(bootstrap_servers=bs, seed=config.seed, partitions=config.partitions,
                                workers=min(config.workers, config.partitions), abort_ratio=config.abort_ratio,
                                max_records=config.records)
    with Admin(bs) as admin:
        admin.create_topic(settings.input_topic, partitions=config.partitions)
        admin.create_topic(settings.output_topic, partitions=config.partitions)
    observer.started(run, bs, cluster.data_dir)

    stop_generator, stop_workers = threading.Event(), threading.Event()
    generator = Generator(settings, history, stop_generator)
    workers = [Worker(i, settings, history, stop_workers) for i in range(settings.workers)]
    started = run.started_at = time.monotonic()
    run.started_wall_s = time.time()
    nemesis = Nemesis(cluster, run.schedule, history, started)
    for thread in (generator, *workers, nemesis):
        thread.start()
    try:
        observer.phase("faults")
        while (elapsed := time.monotonic() - started) < config.duration_s:
            observer.tick(elapsed, history.snapshot(), nemesis.nodes_down)
            time.sleep(min(0.25, config.duration_s - elapsed))  # the run is timed: refresh the display meanwhile
        observer.tick(config.duration_s, history.snapshot(), nemesis.nodes_down)

        observer.phase("healing")
        stop_generator.set()
        nemesis.stop()
        nemesis.join()
        heal_everything(cluster)
        generator.join(60)

        observer.phase("draining")
        deadline = time.monotonic() + config.drain_timeout_s
        run.drained = wait_until_copied(bs, settings, deadline, lambda: observer.tick(
            time.monotonic() - started, history.snapshot(), {}))
    finally:
        stop_generator.set()
        stop_workers.set()
        nemesis.stop()
        for thread in (generator, *workers, nemesis):
            thread.join(60)
        heal_everything(cluster)

    observer.phase("final read")
    run.final = final_read(bs, settings, time.monotonic() + config.drain_timeout_s)
    observer.phase("checking")
    run.result = check(history.events(), run.final, input_topic=settings.input_topic,
                       output_topic=settings.output_topic)


def heal_everything(cluster: LocalCluster) -> None:
    """Mend every link, resume every paused node and start every dead one (all idempotent)."""
    if cluster.network is not None:
        cluster.heal()
    for node in cluster.node_ids:
        cluster.resume(node)
        cluster.restart(node)


# ------------------------------------------------------------ reading back

def _partitions(topic: str, settings: WorkloadSettings) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(settings.partitions)]


def wait_until_decided(admin: Admin, tps: list[TopicPartition], deadline: float) -> bool:
    """Until no transaction is open on `tps` (LSO = HW), so read_committed can read to the end."""
    while True:
        try:
            if admin.last_stable_offsets(tps) == admin.end_offsets(tps):
                return True
        except KafkaError:
            pass  # a node still starting; try again until the deadline
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)  # polling the cluster's state, bounded by the deadline


def read_topic(bs: str, tps: list[TopicPartition], deadline: float) -> tuple[list[Observed], bool]:
    """Everything a fresh read_committed consumer can read up to the last stable offsets."""
    records: list[Observed] = []
    with Consumer(bootstrap_servers=bs, **CONSUMER_SETTINGS) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        while True:
            try:
                if all(consumer.position(tp) >= ends[tp] for tp in tps):
                    return records, True
            except KafkaError:
                pass
            if time.monotonic() > deadline:
                return records, False
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(Observed.of(r) for r in batch)


def committed_offsets(bs: str, settings: WorkloadSettings) -> dict[TopicPartition, int | None]:
    with Consumer(bootstrap_servers=bs, group_id=settings.group_id, **CONSUMER_SETTINGS) as observer:
        return {tp: observer.committed(tp) for tp in _partitions(settings.input_topic, settings)}


def wait_until_copied(bs: str, settings: WorkloadSettings, deadline: float, tick: Callable[[], None]) -> bool:
    """Until the group's committed offsets pass every committed input record."""
    inputs = _partitions(settings.input_topic, settings)
    with Admin(bs) as admin:
        if not wait_until_decided(admin, inputs, deadline):
            return False
    records, complete = read_topic(bs, inputs, deadline)
    if not complete:
        return False
    targets: dict[TopicPartition, int] = {}
    for r in records:
        targets[r.topic_partition] = max(targets.get(r.topic_partition, 0), r.offset + 1)
    while True:
        tick()
        try:
            committed = committed_offsets(bs, settings)
            if all((committed.get(tp) or 0) >= target for tp, target in targets.items()):
                return True
        except KafkaError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)  # polling the group's progress, bounded by the deadline


def final_read(bs: str, settings: WorkloadSettings, deadline: float) -> FinalRead:
    final = FinalRead()
    with Admin(bs) as admin:
        for topic in (settings.input_topic, settings.output_topic):
            tps = _partitions(topic, settings)
            decided = wait_until_decided(admin, tps, deadline)
            final.records[topic], complete = read_topic(bs, tps, deadline)
            final.complete = final.complete and decided and complete
    while True:
        try:
            final.committed = committed_offsets(bs, settings)
            return final
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # a coordinator still loading; bounded by the deadline
