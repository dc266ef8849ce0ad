"""Calls that wait on a node's gRPC port (long-polling fetches, RocketMQ Telemetry streams) hold no worker:
however many there are, every other call, and the nodes' own calls to each other, are served at once."""
from __future__ import annotations

import queue
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as rmq
from rocketmq.grpc_protocol import service_pb2 as rmq_service
from rocketmq.grpc_protocol import service_pb2_grpc as rmq_grpc

from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from tests.helpers import leader_of, wait_until
from txnsim import Admin, LocalCluster, Producer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WAITING = 320  # more than the 256 threads that once served every call of a node


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(nodes=2, data_dir=tmp_path_factory.mktemp("waiting"), txn_shards=4, offsets_shards=2) as c:
        Admin(c.bootstrap_servers).create_topic("quiet", partitions=2)
        yield c


def timed(call) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def a_transaction(cluster) -> None:
    """A commit across both nodes' partitions: its markers are node-to-node calls."""
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"bystander-{time.monotonic_ns()}",
                  request_timeout_ms=5000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in range(2):
            producer.send("quiet", value=b"through", partition=partition)
        producer.commit_transaction()


def test_hundreds_of_long_polling_fetches_stall_no_other_call(cluster):
    node = leader_of(cluster.bootstrap_servers, "quiet", 0)
    # as many clients' connections (one HTTP/2 connection carries only so many calls at once)
    channels = [grpc.insecure_channel(cluster.spec.nodes[node], options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(8)]
    channel = channels[0]
    # an empty partition: each fetch waits for data (up to 25 s) until the transaction below commits some
    request = pb.FetchRequest(isolation_level=1, max_wait_ms=25_000, min_bytes=1, partitions=[
        pb.FetchPartition(topic="quiet", partition=0, fetch_offset=0, max_bytes=1024)])
    waiting = [rpc.PartitionsStub(channels[i % 8]).Fetch.future(request, timeout=60) for i in range(WAITING)]
    try:
        time.sleep(0.5)  # let them all arrive (nothing to wait on: they are meant to be pending)
        assert sum(f.done() for f in waiting) == 0, "fetches of an empty partition answered before their wait"
        cluster_stub = rpc.ClusterStub(channel)
        assert timed(lambda: cluster_stub.Metadata(pb.MetadataRequest(), timeout=5)) < 1.0
        assert timed(lambda: a_transaction(cluster)) < 5.0
        wait_until(lambda: all(f.done() for f in waiting), 10, what="the commit to wake every waiting fetch")
        assert all(f.result().partitions[0].records for f in waiting)
    finally:
        for f in waiting:
            f.cancel()
        for each in channels:
            each.close()


def test_hundreds_of_rocketmq_telemetry_streams_stall_no_other_call(cluster):
    address = cluster.rocketmq_endpoints.split(";")[0]
    channels = [grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(8)]
    channel = channels[0]
    feeds: list[queue.Queue] = []
    streams = []
    for i in range(WAITING):
        feed: queue.Queue = queue.Queue()
        feed.put(rmq_service.TelemetryCommand(settings=rmq.Settings(
            client_type=rmq.PRODUCER, access_point=rmq.Endpoints(addresses=[rmq.Address(host="127.0.0.1", port=1)]),
            request_timeout={"seconds": 3}, publishing=rmq.Publishing(topics=[rmq.Resource(name="quiet")]))))
        feeds.append(feed)
        streams.append(rmq_grpc.MessagingServiceStub(channels[i % 8]).Telemetry(
            iter(feed.get, None), metadata=[("x-mq-client-id", f"flood-{i}")]))
    try:
        first = next(streams[0])  # the node answers a stream's settings as the proxy does
        assert first.status.code in (rmq.OK, 0)
        assert timed(lambda: rpc.ClusterStub(channel).Metadata(pb.MetadataRequest(), timeout=5)) < 1.0
        assert timed(lambda: a_transaction(cluster)) < 5.0
    finally:
        for feed in feeds:
            feed.put(None)
        for stream in streams:
            stream.cancel()
        for each in channels:
            each.close()
