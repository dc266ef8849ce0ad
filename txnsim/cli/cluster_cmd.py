"""`txnsim cluster start|status`: run a cluster in the foreground, or ask one who owns what."""
from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypedDict

from rich.markup import escape
from rich.table import Table

from client.cluster import ClusterClient
from client.transport import call
from coordinator.layout import ClusterLayout, node_layout, read_cluster_spec
from coordinator.membership import node_is_alive
from coordinator.metrics import read_metrics_url
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError
from proto.structs import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from txnsim.cli.common import (
    add_cluster_args,
    add_data_dir_arg,
    add_json_arg,
    bootstrap_servers,
    console,
    error,
    exits_cleanly,
    non_negative_int,
    port_arg,
    positive_int,
    stop_on_interrupt,
)
from txnsim.cli.output import new_table, print_json
from txnsim.cli.ui_cmd import port_number
from txnsim.cluster import LocalCluster


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser("cluster", help="start a cluster or show its status")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    start = verbs.add_parser("start", help="start N node processes and run until Ctrl-C")
    start.add_argument("--nodes", type=positive_int, default=3)
    start.add_argument("--txn-shards", type=positive_int, default=50)
    start.add_argument("--offsets-shards", type=positive_int, default=None)
    add_data_dir_arg(start)
    start.add_argument("--kafka-port", type=port_arg, default=9092,
                       help="the first node's Kafka wire-protocol port, the next nodes' the ports after it "
                            "(default 9092, as Kafka; 0 picks free ports)")
    start.add_argument("--metrics-port", type=int, default=0,
                       help="the first node's Prometheus /metrics port on 127.0.0.1, the next nodes' the ports "
                            "after it (default 0: free ports; `txnsim cluster status` shows them)")
    start.add_argument("--auto-create-topics", action="store_true",
                       help="create a topic that a Kafka client's Metadata names and that does not exist, as "
                            "Kafka's auto.create.topics.enable (off by default: a typo is an error, not a topic)")
    start.add_argument("--num-partitions", type=positive_int, default=1,
                       help="partitions of a topic created without saying how many (Kafka's num.partitions, "
                            "default 1)")
    start.add_argument("--replicated", action="store_true",
                       help="give every node its own directory (DATA/node-<id>) and replicas of every log, with a "
                            "controller on a ZooKeeper started in DATA/zookeeper; topics get 3 replicas by default "
                            "(fewer with fewer nodes), as Kafka's default.replication.factor")
    start.add_argument("--namespaces", action="store_true",
                       help="a replicated cluster with every node and the ZooKeeper on a host of its own: a Linux "
                            "network namespace with its own address (10.213.n.x), whose links `cluster.partition` "
                            "cuts (needs root and nftables)")
    start.add_argument("--ui", nargs="?", type=port_number, const=8080, default=None, metavar="PORT",
                       help="also serve the live web view on 127.0.0.1:PORT (default 8080), as `txnsim ui` does")
    start.set_defaults(func=start_cluster)
    status = verbs.add_parser("status", help="nodes, liveness, the logs each one owns, and ownership changes")
    status.add_argument("--changes", type=non_negative_int, default=20,
                        help="how many recent ownership changes to show")
    add_cluster_args(status)
    add_json_arg(status)
    status.set_defaults(func=cluster_status)


@exits_cleanly
def start_cluster(args: argparse.Namespace) -> int:
    layout = ClusterLayout(Path(args.data_dir))
    problem = unusable_data_dir(Path(args.data_dir))
    if problem:
        error(problem)
        return 1
    if layout.cluster_file.exists():
        spec = read_cluster_spec(layout)
        running = [n for n in spec.node_ids if node_is_alive(node_layout(layout, spec, n), n)]
        if running:  # its nodes would refuse to start, and the old ones would answer for them
            raise SystemExit(f"error: a cluster is already running in {args.data_dir} (nodes {running}); "
                             "stop it with Ctrl-C where it runs, or pass another --data-dir")
    stop_on_interrupt()  # Ctrl-C or SIGTERM stops the nodes cleanly, also when started from a script
    ui_socket = None
    if args.ui is not None:  # bound before the nodes start, so a taken port fails fast
        from txnsim.ui.server import BackgroundUI, bind  # starlette and uvicorn load only when asked for
        ui_socket = bind(args.ui)
    cluster = LocalCluster(nodes=args.nodes, data_dir=args.data_dir, txn_shards=args.txn_shards,
                           offsets_shards=args.offsets_shards, kafka_port=args.kafka_port,
                           metrics_port=args.metrics_port, auto_create_topics_enable=args.auto_create_topics,
                           num_partitions=args.num_partitions, replicated=args.replicated,
                           namespaces=args.namespaces)
    try:
        with console.status(f"starting {args.nodes} nodes in {args.data_dir} ..."):
            cluster.start()
        table = Table(title="txnsim cluster")
        for column in ("node", "address", "pid", "log"):
            table.add_column(column)
        for node_id in cluster.node_ids:
            table.add_row(str(node_id), cluster.spec.nodes[node_id], str(cluster.pid(node_id)),
                          escape(str(cluster.node_log(node_id))))
        console.print(table)
        console.print(f"bootstrap servers: [bold]{cluster.bootstrap_servers}[/bold]")
        console.print(f"RocketMQ 5 endpoints: [bold]{cluster.rocketmq_endpoints}[/bold]")
        console.print(f"Kafka bootstrap servers: [bold]{cluster.kafka_bootstrap_servers}[/bold]")
        if cluster.zookeeper is not None:
            console.print(f"ZooKeeper (the controller's store): [bold]{cluster.zookeeper.address}[/bold]")
        console.print("Prometheus metrics: " + " ".join(str(cluster.metrics_url(n)) for n in cluster.node_ids),
                      soft_wrap=True)
        if ui_socket is not None:
            console.print(f"web view: [bold]{BackgroundUI(Path(args.data_dir), ui_socket).start().url}[/bold]")
        console.print("other commands find this cluster through --data-dir; Ctrl-C stops it.")
        threading.Event().wait()
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        cluster.stop()
    console.print("stopped")
    return 0


def unusable_data_dir(path: Path) -> str | None:
    """Why the nodes could not keep their logs in `path` (one line, Kafka's KAFKA_STORAGE_ERROR), or None."""
    if path.exists() and not path.is_dir():
        return f"KafkaStorageError: [KAFKA_STORAGE_ERROR] data dir {path} is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"KafkaStorageError: [KAFKA_STORAGE_ERROR] cannot create data dir {path}: {exc.strerror}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"KafkaStorageError: [KAFKA_STORAGE_ERROR] data dir {path} is not writable"
    return None


@exits_cleanly
def cluster_status(args: argparse.Namespace) -> int:
    client = ClusterClient(bootstrap_servers(args), request_timeout_ms=args.request_timeout_ms)
    try:
        metadata = client.refresh_metadata()
        led: dict[int, set[tuple[str, int]]] = {}  # what the metadata says each node leads
        for topic in metadata.topics:
            for p in topic.partitions:
                led.setdefault(p.leader, set()).add((topic.name, p.partition))
        nodes: list[NodeRow] = []
        statuses: list[pb.ClusterStatusResponse] = []
        for node in metadata.nodes:
            row: NodeRow = {"node": node.node_id, "address": node.address, "alive": node.alive, "txn_shards": 0,
                            "group_shards": 0, "data_partitions": 0, "not_yet_opened": [], "error": None}
            if node.alive:
                try:
                    status: pb.ClusterStatusResponse = call(client.stubs(node.address).cluster.Status,
                                                            pb.ClusterStatusRequest(), 5.0)
                    statuses.append(status)
                    opened = {(owned.topic, owned.partition) for owned in status.logs}
                    for owned_topic, _partition in opened:
                        row[_KINDS.get(owned_topic, "data_partitions")] += 1
                    # just after a (re)start a node opens its logs one by one: say which are not open yet,
                    # rather than counting them as nothing
                    row["not_yet_opened"] = [_log_name(t, p) for t, p in sorted(led.get(node.node_id, set()) - opened)]
                except KafkaError as exc:
                    row["error"] = str(exc)
            nodes.append(row)
        changes = _ownership_changes(statuses, args.changes)
        urls = metrics_urls(args, metadata.nodes)
        if args.json:
            print_json({"nodes": nodes, "ownership_changes": changes,
                        "metrics_urls": {str(node): url for node, url in urls.items()}})
            return 0
        table = new_table("nodes", "node", "address", "alive", "txn shards", "group shards", "data partitions",
                          "not yet opened")
        for row in nodes:
            pending = row["not_yet_opened"]
            table.add_row(str(row["node"]), str(row["address"]), "yes" if row["alive"] else "[red]no[/red]",
                          str(row["txn_shards"]), str(row["group_shards"]), str(row["data_partitions"]),
                          escape(str(row["error"])) if row["error"] else str(len(pending)) if pending else "-")
        console.print(table)
        for row in nodes:
            if row["not_yet_opened"]:
                console.print(f"node {row['node']} has not yet opened: {escape(', '.join(row['not_yet_opened']))}")
        table = new_table(f"last {len(changes)} ownership changes (transaction shards and data partitions)",
                          "time", "node", "action", "log", "leader epoch", "why")
        for c in changes:
            table.add_row(*(escape(str(c[k])) for k in ("time", "node", "action", "log", "leader_epoch", "why")))
        console.print(table)
        _print_metrics_urls(urls)
    finally:
        client.close()
    return 0


def metrics_urls(args: argparse.Namespace, nodes: Iterable[pb.NodeInfo]) -> dict[int, str | None]:
    """Each node's Prometheus /metrics URL (None: not running), from the file each node writes at start-up in
    DATA/nodes/; {} when --data-dir is not the cluster asked (its cluster.json names other addresses)."""
    layout = ClusterLayout(args.data_dir)
    try:
        spec = read_cluster_spec(layout)
    except (KafkaError, OSError, ValueError):
        return {}
    nodes = list(nodes)
    if any(spec.nodes.get(node.node_id) != node.address for node in nodes):
        return {}
    return {node.node_id: read_metrics_url(node_layout(layout, spec, node.node_id).nodes, node.node_id)
            if node.alive else None for node in nodes}


def _print_metrics_urls(urls: dict[int, str | None]) -> None:
    if not urls:
        console.print("Prometheus metrics: each node writes its URL to DATA/nodes/<id>.metrics; pass the "
                      "cluster's --data-dir to see them", soft_wrap=True)
        return
    console.print("Prometheus metrics:")
    for node_id, url in sorted(urls.items()):
        console.print(f"  node {node_id}  {escape(url) if url else '(not running)'}", soft_wrap=True)


class NodeRow(TypedDict):
    """One node in `cluster status` (a table row, or an object of --json's "nodes")."""

    node: int
    address: str
    alive: bool
    txn_shards: int
    group_shards: int
    data_partitions: int
    not_yet_opened: list[str]
    error: str | None


#: which count of a node's row an owned log adds to (any other topic's: data_partitions)
LogKind = Literal["txn_shards", "group_shards", "data_partitions"]
_KINDS: dict[str, LogKind] = {TRANSACTION_STATE_TOPIC: "txn_shards", CONSUMER_OFFSETS_TOPIC: "group_shards"}


def _ownership_changes(statuses: list[pb.ClusterStatusResponse], limit: int) -> list[dict[str, object]]:
    """Who took or gave up which log, and why, in time order: every live node's ownership.log (one file the
    nodes share on one data directory, one per node on a replicated cluster), each change once."""
    seen: dict[tuple[object, ...], pb.OwnershipChange] = {}
    for status in statuses:
        for c in status.recent_changes:
            if not c.topic.startswith(CONSUMER_OFFSETS_TOPIC):
                seen.setdefault((c.time_ms, c.node_id, c.action, c.topic, c.partition, c.leader_epoch, c.reason), c)
    changes = sorted(seen.values(), key=lambda c: (c.time_ms, c.node_id))
    return [{"time": time.strftime("%H:%M:%S", time.localtime(c.time_ms / 1000)) + f".{c.time_ms % 1000:03d}",
             "time_ms": c.time_ms, "node": c.node_id, "action": c.action, "log": _log_name(c.topic, c.partition),
             "leader_epoch": c.leader_epoch, "why": c.reason} for c in changes[-limit:] if limit]


def _log_name(topic: str, partition: int) -> str:
    return f"txn shard {partition}" if topic == "__transaction_state" else f"{topic}-{partition}"
