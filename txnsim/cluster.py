"""LocalCluster: real node processes that you can break, on one machine.

Every node is its own OS process (`python -m coordinator.node`), started with exec; it
watches its stdin, which this object holds, so nodes die with the process that started
them. kill is SIGKILL, pause SIGSTOP, resume SIGCONT; all four are idempotent.

Three shapes: nodes on loopback sharing one data directory (the default); `replicated`, each node
with its own directory and replicas of every log, a controller on a ZooKeeper started here; and
`namespaces`, the replicated cluster with every node and the ZooKeeper on a host of its own (a Linux
network namespace, txnsim/hosts.py), whose links `partition`, `lose` and `heal` break and mend.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from client.cluster import TRANSACTION, ClusterClient
from client.transport import NodeChannels, call
from coordinator.config import NodeConfig
from coordinator.layout import (
    ClusterLayout,
    ClusterSpec,
    check_shard_counts,
    node_layout,
    read_cluster_spec,
    write_cluster_spec,
)
from coordinator.metrics import read_metrics_url
from proto import txnsim_pb2 as pb
from proto.errors import KafkaConfigurationError, KafkaError, KafkaTimeoutError
from txnsim.hosts import SUBNET_PREFIX, NetworkHosts, namespaces_unavailable
from txnsim.ports import free_port
from txnsim.zookeeper import ZooKeeperServer

log = logging.getLogger(__name__)


class LocalCluster:
    """A cluster of `nodes` node processes; use as a context manager."""

    def __init__(self, nodes: int = 3, data_dir: str | os.PathLike[str] | None = None, txn_shards: int = 50,
                 offsets_shards: int | None = None, host: str = "127.0.0.1", startup_timeout_s: float = 60.0,
                 kafka_port: int | None = None, metrics_port: int | None = None, replicated: bool = False,
                 namespaces: bool = False, **node_settings: Any) -> None:
        """`replicated`: every node keeps its own data directory (DATA/node-<id>) and replicas of every log,
        with a controller on a ZooKeeper this object starts (DATA/zookeeper); internal topics get min(3, nodes)
        replicas and an ISR of min(2, nodes). `namespaces` (root, nftables): a replicated cluster whose nodes
        and ZooKeeper each run in a network namespace of their own, at 10.213.n.x: nodes serve gRPC on port
        7070, Kafka on `kafka_port` or 9092 and metrics on `metrics_port` or 9404 there. `kafka_port`: the first node's Kafka listener port, the next nodes' the ports after it; None keeps
        the ports a restarted cluster had (or picks free ones), 0 picks free ones. `metrics_port`: the same
        for each node's Prometheus /metrics on 127.0.0.1 (None or 0: free ports, chosen by each node)."""
        if nodes < 1:
            raise KafkaConfigurationError("a cluster needs at least one node")
        replicated = replicated or namespaces
        if metrics_port and not 0 < metrics_port <= 65536 - nodes:
            raise KafkaConfigurationError(
                f"metrics_port must leave room for {nodes} ports below 65536, not {metrics_port}")
        self.metrics_port = metrics_port or 0
        self._metrics_ports: dict[int, int] = {}  # node id -> the free port picked for it (metrics_port 0)
        self._own_tmp = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="txnsim-")) if data_dir is None else Path(data_dir)
        self.layout = ClusterLayout(self.data_dir)
        self.startup_timeout_s = startup_timeout_s
        settings = {"txn_shards": txn_shards, "offsets_shards": offsets_shards or txn_shards, **node_settings}
        if replicated:
            for name, value in (("transaction_state_log_replication_factor", min(3, nodes)),
                                ("offsets_topic_replication_factor", min(3, nodes)),
                                ("transaction_state_log_min_isr", min(2, nodes)),
                                # seconds, not Kafka's 5 minutes: a restarted node leads again while you watch
                                ("leader_imbalance_check_interval_seconds", 10)):
                settings.setdefault(name, value)
        config = NodeConfig.from_settings(settings)
        if self.layout.cluster_file.exists():  # a restart of a cluster keeps its nodes and ports
            previous = read_cluster_spec(self.layout)
            if len(previous.nodes) != nodes:
                raise KafkaConfigurationError(
                    f"{self.data_dir} holds a {len(previous.nodes)}-node cluster; start it with nodes="
                    f"{len(previous.nodes)}")
            if previous.replicated != replicated:
                raise KafkaConfigurationError(
                    f"{self.data_dir} holds a {'replicated' if previous.replicated else 'shared-directory'} cluster; "
                    f"start it with replicated={previous.replicated}")
            nodes_by_id = previous.nodes
            kafka_nodes = previous.kafka_nodes
            if namespaces != _on_hosts(previous):
                raise KafkaConfigurationError(f"{self.data_dir} holds a cluster {'on' if _on_hosts(previous) else 'off'}"
                                              f" hosts of its own; start it with namespaces={_on_hosts(previous)}")
        elif namespaces:
            nodes_by_id = {}
            kafka_nodes = {}
        else:
            nodes_by_id = {i: f"{host}:{free_port(host)}" for i in range(nodes)}
            kafka_nodes = {}
        if kafka_port is not None and not 0 <= kafka_port <= 65536 - nodes:
            raise KafkaConfigurationError(f"kafka_port must leave room for {nodes} ports below 65536, not {kafka_port}")
        if kafka_port is not None or set(kafka_nodes) != set(nodes_by_id):  # asked for, or an older cluster file
            kafka_nodes = {i: f"{host}:{kafka_port + i if kafka_port else free_port(host)}" for i in sorted(nodes_by_id)}
        self.network: NetworkHosts | None = None
        if namespaces:
            problem = namespaces_unavailable()
            if problem:
                raise KafkaConfigurationError(f"nodes on hosts of their own: {problem}")
            subnet = int(nodes_by_id[0].split(".")[2]) if nodes_by_id else None
            self.network = NetworkHosts(["zookeeper", *(f"node-{i}" for i in range(nodes))], subnet=subnet)
            # the addresses follow from the subnet, which `start` may have to move (taken meanwhile)
            self._kafka_port = kafka_port or 9092
            self.metrics_port = metrics_port or 9404
        self.spec = ClusterSpec(nodes_by_id, config, kafka_nodes, replicated)
        self.zookeeper: ZooKeeperServer | None = ZooKeeperServer(self.data_dir / "zookeeper") if replicated else None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._paused: set[int] = set()
        self._channels = NodeChannels()
        self._client: ClusterClient | None = None

    # ------------------------------------------------------------ the API of API.md

    @property
    def bootstrap_servers(self) -> str:
        return self.spec.bootstrap_servers

    @property
    def kafka_bootstrap_servers(self) -> str:
        """Every node's Kafka wire-protocol listener, as Kafka clients take `bootstrap.servers`."""
        return self.spec.kafka_bootstrap_servers

    @property
    def rocketmq_endpoints(self) -> str:
        """Every node's address joined by ';', as RocketMQ 5's ClientConfiguration takes them (each node
        serves RocketMQ's MessagingService on its txnsim port)."""
        return ";".join(self.spec.nodes[node_id] for node_id in self.node_ids)

    @property
    def node_ids(self) -> list[int]:
        return self.spec.node_ids

    def coordinator_for(self, transactional_id: str) -> int:
        request = pb.FindCoordinatorRequest(key_type=TRANSACTION, key=transactional_id)
        response: pb.FindCoordinatorResponse = self.client.any_node(
            lambda s: call(s.cluster.FindCoordinator, request, 5.0))
        return response.node_id

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from txnsim.admin import Admin
        with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
            admin.create_topic(name, partitions=partitions)

    def kill(self, node_id: int) -> None:
        proc = self._procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self._paused.discard(node_id)
        log.info("killed node %d (pid %d)", node_id, proc.pid)

    def restart(self, node_id: int) -> None:
        proc = self._procs.get(node_id)
        if proc is not None and proc.poll() is None:
            return
        self._spawn(node_id)
        # a replicated node serves once it is up, though its coordinators may wait for partitions whose only
        # in-sync replicas are on nodes still down: waiting for those would wait for the next restart
        self._wait_ready([node_id], serving_is_enough=self.spec.replicated)

    def pause(self, node_id: int) -> None:
        proc = self._procs.get(node_id)
        if proc is not None and proc.poll() is None and node_id not in self._paused:
            proc.send_signal(signal.SIGSTOP)
            self._paused.add(node_id)

    def resume(self, node_id: int) -> None:
        proc = self._procs.get(node_id)
        if proc is not None and node_id in self._paused:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            self._paused.discard(node_id)

    def is_alive(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def pid(self, node_id: int) -> int | None:
        proc = self._procs.get(node_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def metrics_url(self, node_id: int) -> str | None:
        """Where the node serves its Prometheus metrics (http://127.0.0.1:PORT/metrics, chosen when it started);
        None while it is not running."""
        return read_metrics_url(self.node_layout(node_id).nodes, node_id) if self.is_alive(node_id) else None

    def node_layout(self, node_id: int) -> ClusterLayout:
        """Where a node keeps its files: the cluster's directory, or on a replicated cluster its own."""
        return node_layout(self.layout, self.spec, node_id)

    # ------------------------------------------------------------ life cycle

    def start(self) -> LocalCluster:
        if self.network is not None:
            self._make_hosts()
        else:
            self._check_kafka_ports_free()
            self._check_metrics_ports_free()
        write_cluster_spec(self.layout, self.spec)
        check_shard_counts(self.layout, self.spec.config)
        if self.zookeeper is not None:
            self.zookeeper.start()
        for node_id in self.node_ids:
            self._spawn(node_id)
        self._wait_ready(self.node_ids)
        return self

    def stop(self) -> None:
        for node_id in list(self._paused):
            self.resume(node_id)
        for proc in self._procs.values():
            if proc.poll() is None and proc.stdin is not None:
                try:
                    proc.stdin.close()  # the node's signal to stop gracefully
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for node_id, proc in self._procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("node %d did not stop within 10 s; killing it", node_id)
                proc.kill()
                proc.wait()
        self._procs.clear()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self._client is not None:
            self._client.close()
            self._client = None
        self._channels.close()
        if self.network is not None:
            self.network.destroy()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_tmp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    @property
    def client(self) -> ClusterClient:
        if self._client is None:
            self._client = ClusterClient(self.bootstrap_servers, request_timeout_ms=10_000)
        return self._client

    def node_log(self, node_id: int) -> Path:
        return self.layout.node_log(node_id)

    # ------------------------------------------------------------ the network (namespaces=True)

    def partition(self, *groups: Iterable[int | str], one_way: bool = False) -> None:
        """Cut every link between nodes of different groups: `partition([0], [1, 2])`. A group may also name
        "zookeeper" (the controller's store) or "clients" (this process and every client it starts);
        `one_way`: only what the first group sends is lost (TCP then fails both ways: replies are lost)."""
        self._hosts().partition(*([_host_label(member) for member in group] for group in groups), one_way=one_way)

    def lose(self, node: int | str, percent: int, toward: int | str | None = None) -> None:
        """Drop `percent` of the packets that reach `node` (from `toward` only, if given), at random."""
        self._hosts().lose(_host_label(node), percent, None if toward is None else _host_label(toward))

    def delay(self, node: int | str, delay_ms: int) -> None:
        """Delay every packet `node` sends (tc netem; an error on kernels without it)."""
        self._hosts().delay(_host_label(node), delay_ms)

    def heal(self) -> None:
        """Every link whole again."""
        self._hosts().heal()

    @property
    def faults(self) -> list[str]:
        """What is broken in the network now, in words."""
        return list(self.network.faults) if self.network is not None else []

    # ------------------------------------------------------------ internals

    def _hosts(self) -> NetworkHosts:
        if self.network is None:
            raise KafkaConfigurationError("cutting links needs nodes on hosts of their own: "
                                          "LocalCluster(namespaces=True), as root with nftables")
        return self.network

    def _make_hosts(self) -> None:
        """The namespaces, then the addresses in them (their subnet is known once they exist)."""
        assert self.network is not None
        self.network.create()
        self.spec.nodes.clear()
        self.spec.kafka_nodes.clear()
        for node_id in range(len(self.network.labels) - 1):
            address = self.network.address(f"node-{node_id}")
            self.spec.nodes[node_id] = f"{address}:{NAMESPACE_GRPC_PORT}"
            self.spec.kafka_nodes[node_id] = f"{address}:{self._kafka_port}"
        assert self.zookeeper is not None
        self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper", host=self.network.address("zookeeper"),
                                         port=ZOOKEEPER_PORT, launcher=self.network.command("zookeeper", []))

    def _check_kafka_ports_free(self) -> None:
        """A taken Kafka port is one clear line here, not a node that dies during start-up."""
        for node_id, address in sorted(self.spec.kafka_nodes.items()):
            host, port = address.rsplit(":", 1)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((host, int(port)))
                except OSError as exc:
                    raise KafkaConfigurationError(
                        f"Kafka port {port} (node {node_id}) is taken ({exc.strerror}); choose another first "
                        "port (--kafka-port N, or kafka_port=N; 0 picks free ports)") from None

    def _check_metrics_ports_free(self) -> None:
        """As for Kafka ports: a taken metrics port is one clear line, not a node dying during start-up."""
        if not self.metrics_port:
            return
        for node_id in self.node_ids:
            port = self.metrics_port + node_id
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError as exc:
                    raise KafkaConfigurationError(
                        f"metrics port {port} (node {node_id}) is taken ({exc.strerror}); choose another first "
                        "port (--metrics-port N, or metrics_port=N; 0 picks free ports)") from None

    def _spawn(self, node_id: int) -> None:
        self.layout.make_dirs()
        out = open(self.layout.node_log(node_id), "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        metrics_port = (self.metrics_port if self.network is not None  # each node has an address of its own
                        else self.metrics_port + node_id if self.metrics_port else self._free_metrics_port(node_id))
        if self.zookeeper is None:
            command = node_command(node_id, self.data_dir, metrics_port)
        else:  # nothing shared but the network: its own directory, its addresses, ZooKeeper's, the settings
            command = node_command(
                node_id, self.node_layout(node_id).root, metrics_port, zookeeper=self.zookeeper.address,
                listen=self.spec.nodes[node_id], kafka_listen=self.spec.kafka_nodes.get(node_id),
                settings=[f"{name}={str(value).lower() if isinstance(value, bool) else value}"
                          for name, value in sorted(self.spec.config.as_settings().items())])
        command.append("--exit-on-stdin-eof")
        if self.network is not None:
            command = self.network.command(f"node-{node_id}", command)
        self._procs[node_id] = subprocess.Popen(
            command,
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()

    def _free_metrics_port(self, node_id: int) -> int:
        """A free port for a node's /metrics that is none of the cluster's own addresses. A node binding port 0
        itself could take a port picked for another node's gRPC or Kafka listener that had not bound it yet
        (seen in CI: "Address already in use" at a node's start)."""
        reserved = {int(address.rsplit(":", 1)[1])
                    for address in (*self.spec.nodes.values(), *self.spec.kafka_nodes.values())}
        reserved.update(port for other, port in self._metrics_ports.items() if other != node_id)
        while True:
            port = free_port()
            if port not in reserved:
                self._metrics_ports[node_id] = port
                return port

    def _wait_ready(self, node_ids: list[int], *, serving_is_enough: bool = False) -> None:
        """Until each node answers Status as ready (its shards loaded), or with `serving_is_enough` answers it
        at all (COORDINATOR_LOAD_IN_PROGRESS too)."""
        deadline = time.monotonic() + self.startup_timeout_s
        for node_id in node_ids:
            stubs = self._channels.stubs(self.spec.nodes[node_id])
            backoff = 0.01
            while True:
                proc = self._procs[node_id]
                if proc.poll() is not None:
                    raise KafkaConfigurationError(
                        f"node {node_id} exited with code {proc.returncode} during start-up:\n{self._log_tail(node_id)}")
                try:
                    call(stubs.cluster.Status, pb.ClusterStatusRequest(), 1.0, check=not serving_is_enough)
                    break
                except KafkaError:
                    if time.monotonic() > deadline:
                        raise KafkaTimeoutError(
                            f"node {node_id} was not ready within {self.startup_timeout_s} s:\n{self._log_tail(node_id)}")
                    time.sleep(backoff)  # polling a child process for readiness, bounded by the deadline
                    backoff = min(backoff * 2, 0.2)

    def _log_tail(self, node_id: int, lines: int = 30) -> str:
        try:
            return "\n".join(self.layout.node_log(node_id).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def node_command(node_id: int, data_dir: Path, metrics_port: int, *, zookeeper: str | None = None,
                 listen: str | None = None, kafka_listen: str | None = None, settings: Iterable[str] = ()) -> list[str]:
    """The command of one node process (`python -m coordinator.node`): on a shared directory, or with
    `zookeeper` and `listen` a node of a replicated cluster on its own directory; `settings`: NAME=VALUE."""
    command = [sys.executable, "-m", "coordinator.node", "--node-id", str(node_id), "--data-dir", str(data_dir),
               "--metrics-port", str(metrics_port)]
    if zookeeper is not None:
        command += ["--zookeeper", zookeeper, "--listen", str(listen)]
    if kafka_listen:
        command += ["--kafka-listen", kafka_listen]
    for setting in settings:
        command += ["--setting", setting]
    return command


#: where the nodes and the ZooKeeper listen on hosts of their own (each has its own address)
NAMESPACE_GRPC_PORT = 7070
ZOOKEEPER_PORT = 2181


def _on_hosts(spec: ClusterSpec) -> bool:
    return any(address.startswith(f"{SUBNET_PREFIX}.") for address in spec.nodes.values())


def _host_label(member: int | str) -> str:
    return f"node-{member}" if isinstance(member, int) else member
