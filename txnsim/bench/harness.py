"""What every benchmark shares: a fresh 3-node cluster in a temp dir, and a progress sink.

Benchmarks report progress through `Progress` (the command line shows it with rich; tests
and library callers pass `NullProgress`), so the measuring code never prints.
"""
from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from txnsim.admin import Admin
from txnsim.cluster import LocalCluster

NODES = 3
TXN_SHARDS = 50


class Progress(Protocol):
    def phase(self, description: str, total: int) -> None:
        """Start a new phase of `total` steps (the previous one is finished)."""

    def advance(self, steps: int = 1) -> None: ...


class NullProgress:
    def phase(self, description: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass


@contextlib.contextmanager
def bench_cluster(topics: dict[str, int] | None = None, nodes: int = NODES, replication_factor: int | None = None,
                  **node_settings: Any) -> Iterator[LocalCluster]:
    """A LocalCluster of `nodes` (3 unless told) in a temp dir of its own (deleted afterwards), `topics` created
    (with `replication_factor` copies of each partition; None: the cluster's default)."""
    with tempfile.TemporaryDirectory(prefix="txnsim-bench-") as tmp:
        with LocalCluster(nodes=nodes, data_dir=Path(tmp) / "cluster", txn_shards=TXN_SHARDS,
                          **node_settings) as cluster:
            if topics:
                with Admin(cluster.bootstrap_servers) as admin:
                    for name, partitions in topics.items():
                        admin.create_topic(name, partitions=partitions, replication_factor=replication_factor)
            yield cluster
