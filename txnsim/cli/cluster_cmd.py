"""`txnsim cluster start|status`: run a cluster in the foreground, or ask one who owns what."""
from __future__ import annotations

import argparse
import threading
from collections import Counter

from rich.table import Table

from proto import txnsim_pb2 as pb
from proto.cluster_client import ClusterClient
from proto.errors import KafkaError
from proto.transport import call
from txnsim.cli.common import add_cluster_args, bootstrap_servers, console, exits_cleanly
from txnsim.cluster import LocalCluster


def register(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="start a cluster or show its status")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    start = verbs.add_parser("start", help="start N node processes and run until Ctrl-C")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--txn-shards", type=int, default=50)
    start.add_argument("--offsets-shards", type=int, default=None)
    start.add_argument("--data-dir", default="./txnsim-data")
    start.set_defaults(func=start_cluster)
    status = verbs.add_parser("status", help="nodes, liveness and the logs each one owns")
    add_cluster_args(status)
    status.set_defaults(func=cluster_status)


@exits_cleanly
def start_cluster(args: argparse.Namespace) -> int:
    with console.status(f"starting {args.nodes} nodes in {args.data_dir} ..."):
        cluster = LocalCluster(nodes=args.nodes, data_dir=args.data_dir, txn_shards=args.txn_shards,
                               offsets_shards=args.offsets_shards)
        cluster.start()
    try:
        table = Table(title="txnsim cluster")
        for column in ("node", "address", "pid", "log"):
            table.add_column(column)
        for node_id in cluster.node_ids:
            table.add_row(str(node_id), cluster.spec.nodes[node_id], str(cluster.pid(node_id)),
                          str(cluster.node_log(node_id)))
        console.print(table)
        console.print(f"bootstrap servers: [bold]{cluster.bootstrap_servers}[/bold]")
        console.print("other commands find this cluster through --data-dir; Ctrl-C stops it.")
        threading.Event().wait()
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        cluster.stop()
    return 0


@exits_cleanly
def cluster_status(args: argparse.Namespace) -> int:
    client = ClusterClient(bootstrap_servers(args), request_timeout_ms=5000)
    try:
        metadata = client.refresh_metadata()
        table = Table(title="nodes")
        for column in ("node", "address", "alive", "txn shards", "group shards", "data partitions"):
            table.add_column(column)
        for node in metadata.nodes:
            counts: Counter[str] = Counter()
            if node.alive:
                try:
                    status = call(client.stubs(node.address).cluster.Status, pb.ClusterStatusRequest(), 5.0)
                    for owned in status.logs:
                        kind = {"__transaction_state": "txn", "__consumer_offsets": "group"}.get(owned.topic, "data")
                        counts[kind] += 1
                except KafkaError as exc:
                    counts["error"] += 1
                    console.print(f"node {node.node_id}: {exc}")
            table.add_row(str(node.node_id), node.address, "yes" if node.alive else "[red]no[/red]",
                          str(counts["txn"]), str(counts["group"]), str(counts["data"]))
        console.print(table)
    finally:
        client.close()
    return 0
