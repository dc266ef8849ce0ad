"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2), unchanged, against a real
txnsim cluster: every node serves apache.rocketmq.v2.MessagingService on its txnsim port.

The client logs to ~/logs/rocketmq_python/rocketmq_client.log: read it when one of these fails.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as rmq
from rocketmq.grpc_protocol import service_pb2 as rmq_service
from rocketmq.grpc_protocol import service_pb2_grpc as rmq_grpc

from tests.helpers import read_all, wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import LocalCluster

CHECK_INTERVAL_MS, CHECK_MAX, HALF_TIMEOUT_MS = 300, 20, 300
SETTINGS = dict(FAST_SETTINGS, half_shards=4, transaction_check_interval_ms=CHECK_INTERVAL_MS,
                transaction_check_max=CHECK_MAX, half_message_timeout_ms=HALF_TIMEOUT_MS)
PARTITIONS = 3
_names = itertools.count()


class Checker(TransactionChecker):
    """Answers check-backs from a script (the last answer repeats) and records what it was asked."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers) or [TransactionResolution.COMMIT]
        self.checked: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()

    def check(self, message):
        with self.lock:
            self.checked.append((message.message_id, message.body))
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """conftest's `admin` uses this cluster: checks every 300 ms, so check-back happens within a test."""
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("rocketmq"), **SETTINGS) as c:
        yield c


@pytest.fixture
def topic(admin):
    name = f"points-{next(_names)}"
    admin.create_topic(name, partitions=PARTITIONS)
    return name


@pytest.fixture
def config(cluster):
    return ClientConfiguration(cluster.rocketmq_endpoints, Credentials())


def started(client):
    client.startup()
    return client


@pytest.fixture
def stub(cluster) -> Iterator[rmq_grpc.MessagingServiceStub]:
    """RocketMQ's own stub, for requests the official client would refuse to send."""
    channel = grpc.insecure_channel(cluster.spec.nodes[0])
    try:
        yield rmq_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def message(topic: str, body: bytes, **properties: str) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    for name, value in properties.items():
        msg.add_property(name, value)
    return msg


def records(cluster, topic):
    return read_all(cluster.bootstrap_servers, topic, partitions=PARTITIONS, settle_s=0.2)


def bodies(cluster, topic) -> list[bytes]:
    return sorted(r.value for r in records(cluster, topic))


# ------------------------------------------------------------ normal messages


def test_normal_messages_are_read_back_with_their_id_tag_keys_and_properties(cluster, config, topic):
    producer = Producer(config, (topic,))
    try:
        started(producer)
        receipts = []
        for i in range(6):
            msg = message(topic, f"point-{i}".encode(), order=str(i))
            msg.tag = "points"
            msg.keys = f"order-{i}"
            receipts.append(producer.send(msg))
    finally:
        producer.shutdown()
    got = {r.value: dict(r.headers) for r in records(cluster, topic)}
    assert sorted(got) == [f"point-{i}".encode() for i in range(6)]
    for i, receipt in enumerate(receipts):
        headers = got[f"point-{i}".encode()]
        assert headers["UNIQ_KEY"] == receipt.message_id.encode()
        assert headers["TAGS"] == b"points" and headers["KEYS"] == f"order-{i}".encode()
        assert headers["order"] == str(i).encode()
    # round-robin over each node's own partitions: every partition got some
    assert {r.partition for r in records(cluster, topic)} == set(range(PARTITIONS))


# ------------------------------------------------------------ transactional messages


def test_a_committed_transaction_is_visible_and_a_rolled_back_one_never(cluster, config, topic, admin):
    producer = Producer(config, (topic,), checker=Checker(TransactionResolution.ROLLBACK))
    try:
        started(producer)
        tx = producer.begin_transaction()
        receipt = producer.send(message(topic, b"committed"), tx)
        assert receipt.transaction_id.startswith("TX-")
        assert bodies(cluster, topic) == [], "a half message is invisible until committed"
        tx.commit()
        tx = producer.begin_transaction()
        producer.send(message(topic, b"rolled-back"), tx)
        tx.rollback()
        assert admin.list_half_messages(topic) == []
    finally:
        producer.shutdown()
    assert bodies(cluster, topic) == [b"committed"]


def test_an_undecided_transaction_is_committed_through_the_checker(cluster, config, topic):
    checker = Checker(TransactionResolution.COMMIT)
    producer = Producer(config, (topic,), checker=checker)
    try:
        started(producer)
        tx = producer.begin_transaction()
        receipt = producer.send(message(topic, b"left-open"), tx)  # no commit: the producer "crashed"
        wait_until(lambda: bodies(cluster, topic) == [b"left-open"], 20, "the check-back's COMMIT")
    finally:
        producer.shutdown()
    assert checker.checked[0] == (receipt.message_id, b"left-open")


def test_an_unspecified_answer_is_asked_again_until_the_checker_commits(cluster, config, topic):
    checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
                      TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED, TransactionResolution.COMMIT)
    producer = Producer(config, (topic,), checker=checker)
    try:
        started(producer)
        tx = producer.begin_transaction()
        producer.send(message(topic, b"unsure"), tx)
        wait_until(lambda: bodies(cluster, topic) == [b"unsure"], 20, "the third check-back's COMMIT")
    finally:
        producer.shutdown()
    assert len(checker.checked) >= 3


def test_a_transaction_message_to_a_normal_topic_is_refused(cluster, config, admin, stub):
    topic = f"normal-only-{next(_names)}"
    admin.create_topic(topic, partitions=1, configs={"message.type": "NORMAL"})
    producer = Producer(config, (topic,), checker=Checker())
    try:
        started(producer)
        with pytest.raises(Exception, match="message type"):  # the client reads accept_message_types
            producer.send(message(topic, b"refused"), producer.begin_transaction())
        assert producer.send(message(topic, b"normal")).message_id
    finally:
        producer.shutdown()
    # and the node refuses it too, when a client does not check
    response = stub.SendMessage(send_request(topic, b"refused", rmq.TRANSACTION), timeout=10)
    assert response.status.code == rmq.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, response
    assert bodies_of_one_partition(cluster, topic) == [b"normal"]


def bodies_of_one_partition(cluster, topic):
    return [r.value for r in read_all(cluster.bootstrap_servers, topic, partitions=1, settle_s=0.2)]


# ------------------------------------------------------------ garbage


def send_request(topic: str, body: bytes, message_type: int = rmq.NORMAL, message_id: str = "01ABC") -> Any:
    msg = rmq.Message(topic=rmq.Resource(name=topic), body=body, system_properties=rmq.SystemProperties(
        message_id=message_id, message_type=message_type, body_encoding=rmq.IDENTITY))
    return rmq_service.SendMessageRequest(messages=[msg])


def test_garbage_gets_rocketmq_status_codes(cluster, stub, topic):
    route = stub.QueryRoute(rmq_service.QueryRouteRequest(topic=rmq.Resource(name="no-such-topic")), timeout=10)
    assert route.status.code == rmq.TOPIC_NOT_FOUND
    route = stub.QueryRoute(rmq_service.QueryRouteRequest(topic=rmq.Resource(name=topic)), timeout=10)
    assert route.status.code == rmq.OK and len(route.message_queues) == PARTITIONS
    by_broker: dict[str, list[int]] = {}
    for q in route.message_queues:
        by_broker.setdefault(q.broker.name, []).append(q.id)
    assert all(ids == list(range(len(ids))) for ids in by_broker.values())  # each broker numbers its own, from 0
    assert all(q.broker.id == 0 and q.permission == rmq.READ_WRITE for q in route.message_queues)
    assert stub.SendMessage(send_request("no-such-topic", b"x"), timeout=10).status.code == rmq.TOPIC_NOT_FOUND
    assert stub.SendMessage(send_request(topic, b""), timeout=10).status.code == rmq.BAD_REQUEST
    assert stub.SendMessage(send_request("", b"x"), timeout=10).status.code == rmq.BAD_REQUEST
    assert stub.SendMessage(send_request(topic, b"x", message_id=""), timeout=10).status.code == rmq.BAD_REQUEST
    assert stub.SendMessage(rmq_service.SendMessageRequest(), timeout=10).status.code == rmq.BAD_REQUEST
    for transaction_id in ("not-a-transaction", "TX-99-0", "TX-0-123456789"):
        end = stub.EndTransaction(rmq_service.EndTransactionRequest(
            topic=rmq.Resource(name=topic), message_id="01ABC", transaction_id=transaction_id,
            resolution=rmq.COMMIT, source=rmq.SOURCE_CLIENT), timeout=10)
        assert end.status.code == rmq.INVALID_TRANSACTION_ID, (transaction_id, end)
    group, resource = rmq.Resource(name="readers"), rmq.Resource(name=topic)
    ack = stub.AckMessage(rmq_service.AckMessageRequest(group=group, topic=resource, entries=[
        rmq_service.AckMessageEntry(message_id="01ABC", receipt_handle="not-a-handle")]), timeout=10)
    assert ack.status.code == ack.entries[0].status.code == rmq.INVALID_RECEIPT_HANDLE
    change = stub.ChangeInvisibleDuration(rmq_service.ChangeInvisibleDurationRequest(
        group=group, topic=resource, receipt_handle="0.0.1.feed.x", message_id="01ABC",
        invisible_duration={"seconds": 5}), timeout=10)
    assert change.status.code == rmq.INVALID_RECEIPT_HANDLE  # the handle names another topic
    receive = list(stub.ReceiveMessage(rmq_service.ReceiveMessageRequest(
        message_queue=rmq.MessageQueue(topic=resource), invisible_duration={"seconds": 5}), timeout=10))
    assert [r.status.code for r in receive] == [rmq.BAD_REQUEST]  # no consumer group
    # every RPC answers with a status, even those txnsim does not serve
    assignment = stub.QueryAssignment(rmq_service.QueryAssignmentRequest(topic=rmq.Resource(name=topic)), timeout=10)
    assert assignment.status.code == rmq.UNSUPPORTED


def test_an_end_must_name_the_topic_and_the_message_it_ends(cluster, stub, topic):
    """Transaction ids are handed out in sequence, so knowing one must not be enough to decide a message."""
    sent = stub.SendMessage(send_request(topic, b"pending", rmq.TRANSACTION, message_id="01ENDME"), timeout=10)
    assert sent.status.code == rmq.OK, sent
    tid = sent.entries[0].transaction_id

    def end(topic_name: str, message_id: str) -> int:
        return stub.EndTransaction(rmq_service.EndTransactionRequest(
            topic=rmq.Resource(name=topic_name), message_id=message_id, transaction_id=tid,
            resolution=rmq.COMMIT, source=rmq.SOURCE_CLIENT), timeout=10).status.code

    assert end("", "") == rmq.ILLEGAL_TOPIC
    assert end(topic, "") == rmq.ILLEGAL_MESSAGE_ID
    assert end(topic, "01SOMEONE-ELSE") == rmq.INVALID_TRANSACTION_ID
    assert end(topic + "-other", "01ENDME") == rmq.INVALID_TRANSACTION_ID
    assert bodies_of_one_partition(cluster, topic) == []  # none of those decided it
    assert end(topic, "01ENDME") == rmq.OK
    assert wait_until(lambda: bodies_of_one_partition(cluster, topic) == [b"pending"], 10, what="the commit")


def test_a_send_to_an_unknown_topic_raises_in_the_client(config):
    producer = Producer(config, ())
    try:
        started(producer)
        with pytest.raises(Exception):
            producer.send(message("no-such-topic", b"x"))
    finally:
        producer.shutdown()


# ------------------------------------------------------------ SimpleConsumer (pop)


@pytest.fixture
def group():
    return f"readers-{next(_names)}"


def send_all(config, topic: str, payloads: list[bytes]) -> list[str]:
    producer = Producer(config, (topic,))
    try:
        started(producer)
        return [producer.send(message(topic, body)).message_id for body in payloads]
    finally:
        producer.shutdown()


def receive_until(consumer, count: int, invisible_s: int, timeout_s: float = 20) -> list:
    """Receive until `count` messages came (a receive goes to one node, which serves its own partitions)."""
    got: list = []

    def enough():
        got.extend(consumer.receive(16, invisible_s))
        return len(got) >= count
    wait_until(enough, timeout_s, f"{count} messages")
    return got


def one_partition_topic(admin) -> str:
    name = f"queue-{next(_names)}"
    admin.create_topic(name, partitions=1)
    return name


def test_a_simple_consumer_receives_and_acks_each_message_once(cluster, config, topic, group):
    ids = send_all(config, topic, [f"m{i}".encode() for i in range(6)])
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=1)
    try:
        started(consumer)
        got = receive_until(consumer, 6, invisible_s=30)
        assert sorted(m.message_id for m in got) == sorted(ids)
        assert all(m.delivery_attempt == 1 and m.receipt_handle for m in got)
        for m in got:
            consumer.ack(m)
        for _ in range(2 * PARTITIONS):  # every node's partitions: nothing left anywhere
            assert consumer.receive(16, 30) == []
    finally:
        consumer.shutdown()


def test_an_unacked_message_is_delivered_again_after_its_invisible_duration(cluster, config, admin, group):
    topic = one_partition_topic(admin)
    send_all(config, topic, [b"again"])
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=3)
    try:
        started(consumer)
        first = receive_until(consumer, 1, invisible_s=1)
        assert [(m.body, m.delivery_attempt) for m in first] == [(b"again", 1)]
        second = receive_until(consumer, 1, invisible_s=30)  # visible again after 1 s
        assert [(m.body, m.delivery_attempt) for m in second] == [(b"again", 2)]
        with pytest.raises(Exception, match="40013"):  # the first delivery's handle is void
            consumer.ack(first[0])
        consumer.ack(second[0])
        assert consumer.receive(16, 30) == []
    finally:
        consumer.shutdown()


def test_change_invisible_duration_gives_a_new_handle_and_voids_the_old(cluster, config, admin, group):
    topic = one_partition_topic(admin)
    send_all(config, topic, [b"held"])
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=1)
    try:
        started(consumer)
        [msg] = receive_until(consumer, 1, invisible_s=1)
        old = msg.receipt_handle
        consumer.change_invisible_duration(msg, 30)
        new = msg.receipt_handle
        assert new and new != old
        assert consumer.receive(16, 30) == [], "still invisible past the first duration"
        msg.receipt_handle = old
        with pytest.raises(Exception, match="40013"):
            consumer.ack(msg)
        msg.receipt_handle = new
        consumer.ack(msg)
    finally:
        consumer.shutdown()


def routes(cluster, topic) -> list[set[str]]:
    """The broker addresses each live node's QueryRoute names for `topic`."""
    out = []
    for node_id in cluster.node_ids:
        if not cluster.is_alive(node_id):
            continue
        with grpc.insecure_channel(cluster.spec.nodes[node_id]) as channel:
            route = rmq_grpc.MessagingServiceStub(channel).QueryRoute(
                rmq_service.QueryRouteRequest(topic=rmq.Resource(name=topic)), timeout=5)
        out.append({f"{a.host}:{a.port}" for q in route.message_queues for a in q.broker.endpoints.addresses})
    return out


def test_acks_survive_a_sigkill_of_the_partition_owner(cluster, config, admin, group):
    """Acked beyond the committed prefix (m0 and m2, not m1) and the owner killed: its successor
    delivers m1 again, and never m0 or m2."""
    topic = one_partition_topic(admin)
    send_all(config, topic, [b"m0", b"m1", b"m2"])
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=1)
    try:
        started(consumer)
        got = {m.body: m for m in receive_until(consumer, 3, invisible_s=60)}
        consumer.ack(got[b"m0"])
        consumer.ack(got[b"m2"])
    finally:
        consumer.shutdown()
    owner = cluster.client.refresh_metadata([topic]).topics[0].partitions[0].leader
    cluster.kill(owner)
    try:
        dead = cluster.spec.nodes[owner]
        wait_until(lambda: all(dead not in brokers for brokers in routes(cluster, topic)), 10,
                   "every live node to route the queue to the new owner")
        consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=1)
        try:
            started(consumer)
            again = receive_until(consumer, 1, invisible_s=60)
            assert [m.body for m in again] == [b"m1"], "only the unacked message comes back"
            consumer.ack(again[0])
            assert consumer.receive(16, 60) == []
        finally:
            consumer.shutdown()
    finally:
        cluster.restart(owner)
