"""Where a cluster keeps its files, and the cluster file every node and client reads.

DATA/cluster.json names the nodes (id -> host:port, and the Kafka listener of each) and their
settings; the shard counts are
stored with the data the first time a cluster starts, and a restart with other counts is
refused (a transactional id would silently move to another shard and lose its state).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.config import NodeConfig
from proto.errors import KafkaConfigurationError

CLUSTER_FILE = "cluster.json"


@dataclass(frozen=True)
class ClusterLayout:
    """The paths of one data directory."""

    root: Path

    @property
    def cluster_file(self) -> Path:
        return self.root / CLUSTER_FILE

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def metadata(self) -> Path:
        return self.root / "metadata"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def producer_ids(self) -> Path:
        return self.root / "producer-ids"

    def node_lock(self, node_id: int) -> Path:
        return self.nodes / f"{node_id}.lock"

    def node_heartbeat(self, node_id: int) -> Path:
        return self.nodes / f"{node_id}.heartbeat"

    def node_log(self, node_id: int) -> Path:
        return self.nodes / f"{node_id}.log"

    def make_dirs(self) -> None:
        for path in (self.root, self.logs, self.metadata, self.nodes, self.producer_ids):
            path.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class ClusterSpec:
    """What cluster.json holds."""

    nodes: dict[int, str]                       # node id -> host:port
    config: NodeConfig = field(default_factory=NodeConfig)
    #: node id -> host:port of its Kafka wire-protocol listener (absent in files written before it existed)
    kafka_nodes: dict[int, str] = field(default_factory=dict)
    #: each node has a data directory of its own (DATA/node-<id>) and replicas of its logs, with a controller
    #: on ZooKeeper (DATA/zookeeper); otherwise every node shares DATA and every log exists once
    replicated: bool = False

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.nodes[i] for i in self.node_ids)

    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(self.kafka_nodes[i] for i in self.node_ids if i in self.kafka_nodes)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": {str(k): v for k, v in sorted(self.nodes.items())},
                                "settings": self.config.as_settings()}
        if self.kafka_nodes:
            data["kafka_nodes"] = {str(k): v for k, v in sorted(self.kafka_nodes.items())}
        if self.replicated:
            data["replicated"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterSpec:
        nodes = {int(k): str(v) for k, v in data["nodes"].items()}
        kafka_nodes = {int(k): str(v) for k, v in data.get("kafka_nodes", {}).items()}
        return cls(nodes, NodeConfig.from_settings(data.get("settings", {})), kafka_nodes,
                   bool(data.get("replicated", False)))


def node_layout(layout: ClusterLayout, spec: ClusterSpec, node_id: int) -> ClusterLayout:
    """Where a node of the cluster in `layout` keeps its files (lock, metrics URL, logs): the cluster's own
    directory, or on a replicated cluster the node's (DATA/node-<id>)."""
    return ClusterLayout(layout.root / f"node-{node_id}") if spec.replicated else layout


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` durably: temp file, fsync, rename, fsync the directory."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_cluster_spec(layout: ClusterLayout, spec: ClusterSpec) -> None:
    layout.make_dirs()
    write_atomically(layout.cluster_file, json.dumps(spec.to_json(), indent=2).encode())


def read_cluster_spec(layout: ClusterLayout) -> ClusterSpec:
    try:
        return ClusterSpec.from_json(json.loads(layout.cluster_file.read_text()))
    except FileNotFoundError:
        raise KafkaConfigurationError(f"no cluster at {layout.root}: {layout.cluster_file} is missing") from None


def check_shard_counts(layout: ClusterLayout, config: NodeConfig) -> None:
    """Record the shard counts on first start; refuse a later start with different ones."""
    path = layout.metadata / "shards.json"
    wanted = {"txn_shards": config.txn_shards, "offsets_shards": config.offsets_shards,
              "half_shards": config.half_shards}
    if path.exists():
        stored = json.loads(path.read_text())
        if "half_shards" not in stored:  # written before half messages existed: nothing is stored in them yet
            stored["half_shards"] = config.half_shards
            write_atomically(path, json.dumps(stored).encode())
        if stored != wanted:
            raise KafkaConfigurationError(
                f"this data directory was created with {stored}; starting with {wanted} would move "
                "transactional and group ids to other shards and lose their state. Use the stored counts.")
        return
    write_atomically(path, json.dumps(wanted).encode())
