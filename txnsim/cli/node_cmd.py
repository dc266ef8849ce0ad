"""`txnsim node start` and `txnsim zookeeper start`: one node of a replicated cluster, or the ZooKeeper its
controller keeps its state in, on this host, in the foreground. Nothing is shared between the hosts of such a
cluster but the network: each node has its own data directory and finds the others through ZooKeeper."""
from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from txnsim.cli.common import console, exits_cleanly, port_arg, stop_on_interrupt


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    node = sub.add_parser("node", help="run one node of a replicated cluster on this host")
    verbs = node.add_subparsers(dest="verb", required=True)
    start = verbs.add_parser(
        "start", help="start a node in the foreground (Ctrl-C stops it); the first node's --setting values become "
                      "the cluster's")
    start.add_argument("--node-id", required=True, type=int)
    start.add_argument("--data-dir", required=True, type=Path, help="this node's own directory (its logs and lock)")
    start.add_argument("--zookeeper", required=True, metavar="HOST:PORT[,HOST:PORT][/CHROOT]",
                       help="the ZooKeeper ensemble of the cluster (`txnsim zookeeper start` runs one)")
    start.add_argument("--listen", required=True, metavar="HOST:PORT",
                       help="this node's gRPC address, as the other nodes and clients reach it")
    start.add_argument("--kafka-listen", metavar="HOST:PORT", help="where to serve Kafka's wire protocol")
    start.add_argument("--metrics-port", type=port_arg, default=0,
                       help="Prometheus /metrics on the host of --listen, at PORT (default 0: a free port)")
    start.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                       help="a node setting (NodeConfig's names, e.g. min_insync_replicas=2, "
                            "zookeeper_session_timeout_ms=6000; repeatable)")
    start.set_defaults(func=start_node)
    zookeeper = sub.add_parser("zookeeper", help="run the ZooKeeper a replicated cluster keeps its state in")
    zk_verbs = zookeeper.add_subparsers(dest="verb", required=True)
    zk_start = zk_verbs.add_parser("start", help="start a single ZooKeeper server in the foreground (Ctrl-C stops it)")
    zk_start.add_argument("--data-dir", required=True, type=Path)
    zk_start.add_argument("--listen", default="127.0.0.1:2181", metavar="HOST:PORT",
                          help="its client address (default 127.0.0.1:2181, as ZooKeeper's)")
    zk_start.set_defaults(func=start_zookeeper)


def start_node(args: argparse.Namespace) -> int:
    """Becomes the node process (exec), so signals, exit code and output are the node's own."""
    from txnsim.cluster import node_command
    command = node_command(args.node_id, args.data_dir, args.metrics_port, zookeeper=args.zookeeper,
                           listen=args.listen, kafka_listen=args.kafka_listen, settings=args.setting)
    sys.stdout.flush()
    os.execv(sys.executable, command)


@exits_cleanly
def start_zookeeper(args: argparse.Namespace) -> int:
    from txnsim.zookeeper import ZooKeeperServer
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"error: [INVALID_CONFIG] --listen takes HOST:PORT, not {args.listen!r}")
    stop_on_interrupt()
    server = ZooKeeperServer(args.data_dir, host=host, port=int(port))
    try:
        with console.status(f"starting ZooKeeper on {args.listen} ..."):
            server.start()
        console.print(f"ZooKeeper serves [bold]{server.address}[/bold] (data in {args.data_dir}); start nodes with "
                      f"`txnsim node start --zookeeper {server.address} ...`; Ctrl-C stops it.")
        threading.Event().wait()
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        server.stop()
    return 0
