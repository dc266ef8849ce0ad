"""RocketMQ-style transactional messages through txnsim's own producer, on real nodes: a message is
visible exactly when its local transaction committed, whatever is lost or killed on the way."""
from __future__ import annotations

import itertools
import threading
from collections import defaultdict

import pytest

from tests.helpers import read_all, wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import LocalCluster, LocalTransactionState, Producer, TransactionListener, errors

CHECK_INTERVAL_MS, CHECK_MAX, HALF_TIMEOUT_MS = 300, 4, 300
HALF_SETTINGS = dict(FAST_SETTINGS, half_shards=4, transaction_check_interval_ms=CHECK_INTERVAL_MS,
                     transaction_check_max=CHECK_MAX, half_message_timeout_ms=HALF_TIMEOUT_MS)
_names = itertools.count()
COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)


class Orders(TransactionListener):
    """A local 'database': the order rows a local transaction committed, looked up on check-back.

    `answers` scripts check-backs per order id (a list consumed in turn; the last one repeats)."""

    def __init__(self) -> None:
        self.committed: set[bytes] = set()
        self.answers: dict[bytes, list[LocalTransactionState]] = {}
        self.checks: dict[bytes, list[int]] = defaultdict(list)
        self.lock = threading.Lock()
        self.in_progress: set[bytes] = set()  # a check while the local transaction runs must say UNKNOW
        self.seen_during_local_txn: tuple | None = None
        self.peek = None

    def execute_local_transaction(self, msg, arg):
        with self.lock:
            self.in_progress.add(msg.key)
        try:
            if self.peek is not None:
                self.seen_during_local_txn = self.peek()
            if arg is COMMIT:
                self.committed.add(msg.key)
            return arg
        finally:
            with self.lock:
                self.in_progress.discard(msg.key)

    def check_local_transaction(self, msg):
        with self.lock:
            self.checks[msg.key].append(msg.check_times)
            scripted = self.answers.get(msg.key)
            if scripted:
                return scripted.pop(0) if len(scripted) > 1 else scripted[0]
            if msg.key in self.in_progress:
                return UNKNOW
        return COMMIT if msg.key in self.committed else ROLLBACK


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """conftest's `admin` uses this cluster: checks every 300 ms, so check-back happens within a test."""
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("half"), **HALF_SETTINGS) as c:
        yield c


@pytest.fixture(params=["rocketmq", "kafka"])
def storage(request):
    """Both designs: parked in RMQ_SYS_TRANS_HALF_TOPIC and copied, or written in place and marked."""
    return request.param


@pytest.fixture
def topic(admin, storage):
    name = f"points-{next(_names)}"
    admin.create_topic(name, partitions=2, configs={"half.message.storage": storage})
    return name


@pytest.fixture
def group():
    return f"order-service-{next(_names)}"


def producer(cluster, group, listener) -> Producer:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, producer_group=group, transaction_listener=listener)
    assert p.wait_for_check_backs(10), "the producer never registered for check-backs"
    return p


def values(cluster, topic, partitions=2, isolation_level="read_committed", settle_s=2.0, open_allowed=False):
    return sorted(r.value for r in read_all(cluster.bootstrap_servers, topic, partitions=partitions,
                                            isolation_level=isolation_level, settle_s=settle_s,
                                            open_allowed=open_allowed))


def pending(admin, group):
    return admin.list_half_messages(group)


def test_a_message_is_visible_exactly_when_its_local_transaction_committed(cluster, admin, topic, group, storage):
    orders = Orders()
    with producer(cluster, group, orders) as p:
        orders.peek = lambda: (values(cluster, topic, settle_s=0, open_allowed=True),
                               values(cluster, topic, isolation_level="read_uncommitted", settle_s=0, open_allowed=True))
        committed = p.send_message_in_transaction(topic, value=b"order-1", key=b"1", arg=COMMIT,
                                                  headers=[("orderId", b"1")])
        in_committed, in_uncommitted = orders.seen_during_local_txn
        assert in_committed == [], "read_committed never sees an undecided message"
        # parked in the system topic it is invisible to everyone; written in place, read_uncommitted sees it
        assert in_uncommitted == ([] if storage == "rocketmq" else [b"order-1"])
        rolled_back = p.send_message_in_transaction(topic, value=b"order-2", key=b"2", arg=ROLLBACK)
    assert committed.local_transaction_state is COMMIT and committed.send_status == "SEND_OK"
    assert committed.transaction_id and committed.message_id and committed.queue_offset >= 0
    assert rolled_back.local_transaction_state is ROLLBACK
    records = read_all(cluster.bootstrap_servers, topic, partitions=2, settle_s=0.2)
    assert [r.value for r in records] == [b"order-1"]
    headers = dict(records[0].headers)
    assert headers["orderId"] == b"1" and headers["UNIQ_KEY"] == committed.message_id.encode()
    assert pending(admin, group) == []


def test_a_lost_end_is_resolved_by_check_back(cluster, admin, topic, group):
    orders = Orders()
    with producer(cluster, group, orders) as p:
        p.faults.lose_ends = True  # left set: it loses the ends, not the answers to checks
        lost_commit = p.send_message_in_transaction(topic, value=b"kept", key=b"1", arg=COMMIT)
        lost_rollback = p.send_message_in_transaction(topic, value=b"dropped", key=b"2", arg=ROLLBACK)
        listed = {m.transaction_id for m in pending(admin, group)}
        assert {lost_commit.transaction_id, lost_rollback.transaction_id} <= listed
        wait_until(lambda: not pending(admin, group), 15, "check-backs to decide both")
    assert orders.checks[b"1"] == [1] and orders.checks[b"2"] == [1]
    assert values(cluster, topic) == [b"kept"]


def test_unknow_is_asked_again_each_interval_until_the_producer_knows(cluster, admin, topic, group):
    orders = Orders()
    orders.answers[b"1"] = [UNKNOW, UNKNOW, COMMIT]
    with producer(cluster, group, orders) as p:
        p.send_message_in_transaction(topic, value=b"slow", key=b"1", arg=UNKNOW)
        wait_until(lambda: not pending(admin, group), 15, "the third check to commit")
    assert orders.checks[b"1"] == [1, 2, 3], "one check per interval, counted, none repeated"
    assert values(cluster, topic) == [b"slow"]


def test_a_message_never_resolved_is_discarded_after_check_max(cluster, admin, topic, group):
    orders = Orders()
    orders.answers[b"1"] = [UNKNOW]
    with producer(cluster, group, orders) as p:
        p.send_message_in_transaction(topic, value=b"undecided", key=b"1", arg=UNKNOW)
        wait_until(lambda: not pending(admin, group), 20, "the discard")
    assert orders.checks[b"1"] == list(range(1, CHECK_MAX + 1)), "exactly check_max checks, then none"
    assert values(cluster, topic) == [], "a discarded message is never delivered"


def test_checks_wait_for_a_producer_of_the_group_without_counting(cluster, admin, topic, group):
    first = Orders()
    with producer(cluster, group, first) as p:
        p.faults.lose_ends = True
        sent = p.send_message_in_transaction(topic, value=b"late", key=b"1", arg=COMMIT)
        p.faults.lose_ends = False
        p.close()  # the group has no live producer now
        wait_until(lambda: [m.unanswered_checks for m in pending(admin, group)] >= [2], 15,
                   "two passes without a producer")
        [waiting] = pending(admin, group)
        assert waiting.check_times == 0, "a check that reached nobody is not counted"
    second = Orders()
    second.committed.add(b"1")  # the order row is in the database the restarted service reads
    with producer(cluster, group, second):
        wait_until(lambda: not pending(admin, group), 15, "the returning producer to be asked")
    assert second.checks[b"1"] == [1] and first.checks == {}
    assert values(cluster, topic) == [b"late"] and sent.transaction_id


def test_check_counts_survive_a_sigkill_of_the_shard_owner(cluster, admin, topic, group):
    orders = Orders()
    orders.answers[b"1"] = [UNKNOW, UNKNOW, UNKNOW, COMMIT]
    with producer(cluster, group, orders) as p:
        p.send_message_in_transaction(topic, value=b"survivor", key=b"1", arg=UNKNOW)
        wait_until(lambda: len(orders.checks[b"1"]) >= 2, 15, "two checks before the crash")
        [before] = pending(admin, group)
        cluster.kill(before.node_id)
        try:  # (an empty listing proves nothing while the shard moves: wait for the message itself)
            wait_until(lambda: values(cluster, topic, settle_s=0, open_allowed=True) == [b"survivor"], 20,
                       "the new owner to finish the checks and commit")
        finally:
            cluster.restart(before.node_id)
    seen = orders.checks[b"1"]
    assert seen == list(range(1, len(seen) + 1)), f"counts went on from the log, never reset or repeated: {seen}"
    assert seen[-1] == 4
    assert values(cluster, topic) == [b"survivor"]


def test_a_paused_shard_owner_is_taken_over_and_sends_no_check_when_it_wakes(cluster, admin, topic, group):
    """SIGSTOP past the session timeout: another node goes on checking from the log; the woken node is
    fenced, and since a check is sent only after its count is durably appended, it sends none."""
    orders = Orders()
    orders.answers[b"1"] = [UNKNOW, UNKNOW, UNKNOW, COMMIT]
    owner = _owner_of_group(cluster, group)
    with producer(cluster, group, orders) as p:
        p.send_message_in_transaction(topic, value=b"paused", key=b"1", arg=UNKNOW)
        wait_until(lambda: len(orders.checks[b"1"]) >= 1, 15, "a first check before the pause")
        cluster.pause(owner)
        try:
            wait_until(lambda: len(orders.checks[b"1"]) >= 3, 20, "another node to go on checking")
        finally:
            cluster.resume(owner)
        wait_until(lambda: values(cluster, topic, settle_s=0, open_allowed=True) == [b"paused"], 20, "the commit")
    assert orders.checks[b"1"] == [1, 2, 3, 4], "no check repeated, none from the woken node"


def test_commits_survive_a_sigkill_of_the_shard_owner_and_are_copied_once(cluster, admin, topic, group):
    orders = Orders()
    with producer(cluster, group, orders) as p:
        for i in range(20):
            p.send_message_in_transaction(topic, value=f"m{i}".encode(), key=str(i).encode(), arg=COMMIT)
        shard_owner = _owner_of_group(cluster, group)
        cluster.kill(shard_owner)
        try:
            after = p.send_message_in_transaction(topic, value=b"after", key=b"99", arg=COMMIT)
        finally:
            cluster.restart(shard_owner)
    assert after.local_transaction_state is COMMIT and after.send_status == "SEND_OK"
    assert values(cluster, topic) == sorted([f"m{i}".encode() for i in range(20)] + [b"after"])


def test_bad_input_gets_rocketmq_and_kafka_error_names(cluster, admin, topic, group):
    orders = Orders()
    admin.create_topic(f"normal-only-{group}", partitions=1, configs={"message.type": "NORMAL"})
    with producer(cluster, group, orders) as p:
        with pytest.raises(errors.MessagePropertyConflictWithTypeError, match="accepts NORMAL"):
            p.send_message_in_transaction(f"normal-only-{group}", value=b"x", arg=COMMIT)
        with pytest.raises(errors.IllegalMessagePropertyKeyError, match="UNIQ_KEY"):
            p.send_message_in_transaction(topic, value=b"x", arg=COMMIT, headers=[("UNIQ_KEY", b"forged")])
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            p.send_message_in_transaction("no-such-topic", value=b"x", arg=COMMIT)
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            p.send_message_in_transaction(topic, value=b"x", arg=COMMIT, partition=7)
    with pytest.raises(errors.IllegalStateError, match="producer_group"):
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as plain:
            plain.send_message_in_transaction(topic, value=b"x")
    with pytest.raises(errors.KafkaConfigurationError, match="producer_group"):
        Producer(bootstrap_servers=cluster.bootstrap_servers, transaction_listener=orders)
    with pytest.raises(errors.InvalidConfigError):
        admin.create_topic(f"bad-config-{group}", partitions=1, configs={"message.type": "SOMETIMES"})
    assert values(cluster, topic, isolation_level="read_uncommitted") == []
    assert pending(admin, group) == []


def _owner_of_group(cluster, group) -> int:
    from client.cluster import HALF_MESSAGES
    from client.transport import call
    from proto import txnsim_pb2 as pb
    request = pb.FindCoordinatorRequest(key_type=HALF_MESSAGES, key=group)
    return cluster.client.any_node(lambda s: call(s.cluster.FindCoordinator, request, 5.0)).node_id


def test_a_send_retried_while_its_first_attempt_is_being_written_stores_one_half_message(cluster, admin, topic, group):
    """A retry can reach the node while the first attempt is still being made durable (a slow disk, a
    short stall): both must get the same half message, not one each (each would be checked back and,
    committed, delivered: twice)."""
    import grpc

    from proto import txnsim_pb2 as pb
    from proto.txnsim_pb2_grpc import HalfMessagesStub
    owner = _owner_of_group(cluster, group)
    channel = grpc.insecure_channel(cluster.spec.nodes[owner])
    stub = HalfMessagesStub(channel)
    answers = []
    for attempt in range(10):
        request = pb.SendHalfMessageRequest(producer_group=group, message=pb.HalfMessage(
            topic=topic, partition=0, value=b"once-%d" % attempt, message_id=f"{group}-retried-{attempt}"))
        futures = [stub.SendHalfMessage.future(request, timeout=10) for _ in range(4)]
        answers.append({f.result().transaction_id for f in futures})
    channel.close()
    assert all(len(tids) == 1 for tids in answers), answers
    assert len(pending(admin, group)) == 10


def test_a_retried_in_place_send_whose_write_fails_leaves_the_message_undecided_for_its_end(tmp_path):
    """The first attempt of a send was written in place and answered, so the producer's local transaction
    may have committed. A retry of it whose write then fails (the partition's owner is stalled) reports the
    error and must not roll the message back: the producer's COMMIT still delivers it."""
    import grpc

    from proto import txnsim_pb2 as pb
    from proto.txnsim_pb2_grpc import HalfMessagesStub
    from tests.helpers import leader_of
    from txnsim import Admin
    # a stall longer than a node's 5 s request timeout, with no takeover meanwhile: the write fails, no owner moves
    settings = dict(HALF_SETTINGS, broker_session_timeout_ms=60_000)
    with LocalCluster(nodes=3, data_dir=tmp_path, **settings) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("points", partitions=1, configs={"half.message.storage": "kafka"})
        stalled = leader_of(c.bootstrap_servers, "points", 0)
        group = next(g for g in (f"orders-{i}" for i in range(100)) if _owner_of_group(c, g) != stalled)
        channel = grpc.insecure_channel(c.spec.nodes[_owner_of_group(c, group)])
        try:
            stub = HalfMessagesStub(channel)
            send = pb.SendHalfMessageRequest(producer_group=group, message=pb.HalfMessage(
                topic="points", partition=0, value=b"-10", message_id="order-1"))
            first = stub.SendHalfMessage(send, timeout=10)
            assert first.error_code == 0, first.error_message
            c.pause(stalled)
            try:
                retry_error = stub.SendHalfMessage(send, timeout=20).error_code
            except grpc.RpcError as error:
                retry_error = error.code()
            finally:
                c.resume(stalled)
            assert retry_error, "the retry's write reached a stalled partition owner"
            end = stub.EndHalfTransaction(pb.EndHalfTransactionRequest(
                transaction_id=first.transaction_id, producer_group=group, message_id="order-1",
                resolution=pb.RESOLUTION_COMMIT, source=pb.SOURCE_CLIENT), timeout=20)
            assert end.error_code == 0, end.error_message
        finally:
            channel.close()
        assert values(c, "points", partitions=1) == [b"-10"]
