"""Random and mutated requests at every front door of real nodes: the Kafka port (every API at every version
served), txnsim's gRPC services and RocketMQ's (every method), and the web view's API. Throughout, a bystander
client's calls must each be answered within a second, and at the end the nodes must be alive, have logged no
node bug, and have changed nothing of the data kept under names no fuzzed request can use.

Seeded (TXNSIM_FUZZ_SEED, default 1) with a bounded budget per door (TXNSIM_FUZZ_BUDGET), so a failure
names the seed that reproduces it.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from coordinator.kafka.apis import SERVED
from proto import txnsim_pb2 as pb
from tests.fuzzing import Fuzz
from txnsim import Admin, LocalCluster, Producer, TopicPartition
from txnsim.ui.server import BackgroundUI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SEED = int(os.environ.get("TXNSIM_FUZZ_SEED", "1"))
BUDGET = int(os.environ.get("TXNSIM_FUZZ_BUDGET", "1500"))
CANARY_TOPIC, CANARY_GROUP, CANARY_TXN = "canary-orders", "canary-readers", "canary-tx"
AVOID = frozenset({CANARY_TOPIC, CANARY_GROUP, CANARY_TXN})
FUZZ_TOPIC = "fuzz-topic"
#: methods that may wait (long polls, held joins, streams): a deadline there is their answer, not a hang
WAITING = {"Fetch", "JoinGroup", "SyncGroup", "CheckBack", "ReceiveMessage", "Telemetry", "AddPartitionsToTxn",
           "InitProducerId", "EndTxn", "SendHalfMessage", "EndHalfTransaction", "JoinBatchTxn", "EndBatchTxn",
           "SendMessage", "EndTransaction"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=2, data_dir=tmp_path_factory.mktemp("fuzz"), txn_shards=4, offsets_shards=2,
                      half_shards=2, group_min_session_timeout_ms=500, group_initial_rebalance_delay_ms=100,
                      transaction_max_timeout_ms=60_000) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic(CANARY_TOPIC, partitions=2)
            admin.create_topic(FUZZ_TOPIC, partitions=2)
        with Producer(bootstrap_servers=c.bootstrap_servers, transactional_id=CANARY_TXN) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            for i in range(20):
                producer.send(CANARY_TOPIC, value=b"canary %d" % i, partition=i % 2)
            producer.commit_transaction()
        with Admin(c.bootstrap_servers) as admin:
            admin.alter_consumer_group_offsets(CANARY_GROUP, {TopicPartition(CANARY_TOPIC, 0): 7})
        yield c


def stored(cluster: LocalCluster) -> tuple[dict[str, bytes], dict]:
    """The canary's log bytes and committed offsets: nothing a fuzzed request may change."""
    logs = {str(path.relative_to(cluster.data_dir)): path.read_bytes()
            for path in sorted((cluster.data_dir / "logs").glob(f"{CANARY_TOPIC}-*/*.log"))}
    with Admin(cluster.bootstrap_servers) as admin:
        offsets = {tp: o.offset for tp, o in admin.list_consumer_group_offsets(CANARY_GROUP).items()}
    return logs, offsets


class Bystander:
    """A client that keeps asking every node something cheap over both ports: the slowest answer, and failures."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._stop = threading.Event()
        self.slowest_s = 0.0
        self.failures: list[str] = []
        self.calls = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        kafka = [address(cluster_addr) for cluster_addr in self._cluster.kafka_bootstrap_servers.split(",")]
        channels = [grpc.insecure_channel(a) for a in self._cluster.bootstrap_servers.split(",")]
        metadata = [ch.unary_unary("/txnsim.Cluster/Metadata", request_serializer=pb.MetadataRequest.SerializeToString,
                                   response_deserializer=pb.MetadataResponse.FromString) for ch in channels]
        correlation = 0
        while not self._stop.is_set():
            for host_port, call in zip(kafka, metadata):
                correlation += 1
                started = time.monotonic()
                try:
                    with socket.create_connection(host_port, timeout=5) as sock:
                        kafka_round_trip(sock, ApiVersionsRequest(version=3, client_software_name="bystander",
                                                                  client_software_version="1"), correlation)
                        kafka_round_trip(sock, MetadataRequest(version=9, topics=None), correlation + 1)
                    call(pb.MetadataRequest(), timeout=5)
                except (OSError, grpc.RpcError, AssertionError) as exc:
                    self.failures.append(f"{host_port}: {type(exc).__name__}: {exc}")
                self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                self.calls += 1
            self._stop.wait(0.05)
        for ch in channels:
            ch.close()


def address(host_port: str) -> tuple[str, int]:
    host, port = host_port.rsplit(":", 1)
    return host, int(port)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def kafka_round_trip(sock: socket.socket, request, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="bystander")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    return read_exactly(sock, size)


def node_bugs(cluster: LocalCluster) -> list[str]:
    """Lines of the nodes' logs that say a node bug happened (a traceback, or a handler that failed)."""
    lines = []
    for node in cluster.node_ids:
        for line in cluster.node_log(node).read_text(errors="replace").splitlines():
            if "Traceback" in line or "failed on the node" in line or "stopped on a bug" in line:
                lines.append(f"node {node}: {line}")
    return lines


# ------------------------------------------------------------ the doors


def fuzz_kafka(cluster: LocalCluster, fuzz: Fuzz, budget: int) -> None:
    targets = [address(a) for a in cluster.kafka_bootstrap_servers.split(",")]
    apis = list(SERVED.values())
    sock: socket.socket | None = None
    for i in range(budget):
        api = fuzz.rng.choice(apis)
        version = fuzz.rng.randint(api.lowest_served, api.max_version)
        try:
            request = fuzz.kafka_request(api.request, version)
            request.with_header(correlation_id=i, client_id=fuzz.string()[:40])
            frame = bytes(request.encode(header=True, framed=True))
        except Exception:  # noqa: BLE001 - a drawn value the schema cannot encode: draw again
            continue
        if fuzz.rng.random() < 0.3:
            body = fuzz.mutate(frame[4:])
            frame = (struct.pack(">i", len(body)) if fuzz.rng.random() < 0.8 else frame[:4]) + body
        if sock is None:
            sock = socket.create_connection(fuzz.rng.choice(targets), timeout=5)
            sock.settimeout(0.5)
        try:
            sock.sendall(frame)
            sock.recv(1 << 16)  # an answer, or the node closing a connection that sent garbage
        except (OSError, TimeoutError):
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def grpc_methods() -> list[tuple[str, object, bool, bool]]:
    """(path, input descriptor, client streaming, server streaming) of every method of every service."""
    from coordinator.rocketmq.rmq_wire import rmq_service as rmq_module
    methods = []
    for module, package in ((pb, "txnsim"), (rmq_module, "apache.rocketmq.v2")):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods.append((f"/{service.full_name}/{method.name}", method.input_type, method.client_streaming,
                                method.server_streaming))
    assert package  # both packages were walked
    return methods


def message_class(descriptor) -> type:
    from google.protobuf import message_factory
    return message_factory.GetMessageClass(descriptor)


def fuzz_grpc(cluster: LocalCluster, fuzz: Fuzz, budget: int) -> list[str]:
    """Random calls to every method; the statuses that mean a handler raised instead of answering."""
    channels = [grpc.insecure_channel(a) for a in cluster.bootstrap_servers.split(",")]
    methods = grpc_methods()
    broken: list[str] = []
    try:
        for _ in range(budget):
            path, descriptor, client_streaming, server_streaming = fuzz.rng.choice(methods)
            request = fuzz.message(descriptor, message_class(descriptor))
            raw = request.SerializeToString()
            if fuzz.rng.random() < 0.2:
                raw = fuzz.mutate(raw)
            channel = fuzz.rng.choice(channels)
            name = path.rsplit("/", 1)[1]
            timeout = 3.0 if name in WAITING else 5.0
            try:
                if client_streaming:
                    call = channel.stream_stream(path, request_serializer=lambda b: b, response_deserializer=bytes)
                    for _item in call(iter([raw] * fuzz.rng.randint(0, 2)), timeout=timeout):
                        pass
                elif server_streaming:
                    call = channel.unary_stream(path, request_serializer=lambda b: b, response_deserializer=bytes)
                    for _item in call(raw, timeout=timeout):
                        pass
                else:
                    channel.unary_unary(path, request_serializer=lambda b: b, response_deserializer=bytes)(
                        raw, timeout=timeout)
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and name in WAITING:
                    continue
                if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
                    broken.append(f"{path}: {code.name}: {error.details()}")
    finally:
        for channel in channels:
            channel.close()
    return broken


def fuzz_web(page: str, fuzz: Fuzz, budget: int) -> list[str]:
    """Random GETs of the web view's API; the ones answered 500 or worse, or not as JSON."""
    paths = ["api/cluster", "api/partitions", "api/transactions", "api/groups", "api/half-messages"]
    broken = []
    for _ in range(budget):
        choice = fuzz.rng.random()
        if choice < 0.3:
            url = page + fuzz.rng.choice(paths)
        elif choice < 0.6:
            query = {k: fuzz.rng.choice([fuzz.string(), str(fuzz.integer()), "9" * 5000])
                     for k in fuzz.rng.sample(["topic", "partition", "offset", "limit"], fuzz.rng.randint(0, 4))}
            url = page + "api/messages?" + urllib.parse.urlencode(query)
        else:
            kind = fuzz.rng.choice(["transactions", "groups"])
            last = fuzz.rng.choice(["", "5", "-1", "x", "9" * 5000])
            url = f"{page}api/{kind}/{urllib.parse.quote(fuzz.string(), safe='')}/timeline?last={last}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                broken.append(f"{url[:200]}: {error.code}")
        except (OSError, ValueError) as exc:
            broken.append(f"{url[:200]}: {type(exc).__name__}: {exc}")
    return broken


def test_fuzzed_requests_at_every_door_harm_no_data_and_stall_no_bystander(cluster):
    before = stored(cluster)
    fuzz = Fuzz(SEED, AVOID, FUZZ_TOPIC)
    ui = BackgroundUI(cluster.data_dir, 0, interval_s=1.0).start()
    try:
        with Bystander(cluster) as bystander:
            fuzz_kafka(cluster, fuzz, BUDGET)
            grpc_broken = fuzz_grpc(cluster, fuzz, BUDGET // 3)
            web_broken = fuzz_web(ui.url, fuzz, BUDGET // 10)
    finally:
        ui.stop()
    assert all(cluster.is_alive(node) for node in cluster.node_ids), f"a node died (seed {SEED})"
    assert node_bugs(cluster) == [], f"node bugs (seed {SEED})"
    assert grpc_broken == [], f"gRPC calls that raised instead of answering (seed {SEED})"
    assert web_broken == [], f"web API answers of 500 or worse (seed {SEED})"
    assert bystander.calls > 0 and bystander.failures == [], bystander.failures[:5]
    assert bystander.slowest_s < 1.0, f"a bystander waited {bystander.slowest_s:.2f} s (seed {SEED})"
    assert stored(cluster) == before, f"the canary's data changed (seed {SEED})"

