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
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer,
                      TransactionChecker, TransactionResolution)
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
    assert route.status.code == rmq.OK and [q.id for q in route.message_queues] == list(range(PARTITIONS))
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
    # every RPC answers with a status, even those txnsim does not serve
    assignment = stub.QueryAssignment(rmq_service.QueryAssignmentRequest(topic=rmq.Resource(name=topic)), timeout=10)
    assert assignment.status.code == rmq.UNSUPPORTED


def test_a_send_to_an_unknown_topic_raises_in_the_client(config):
    producer = Producer(config, ())
    try:
        started(producer)
        with pytest.raises(Exception):
            producer.send(message("no-such-topic", b"x"))
    finally:
        producer.shutdown()
