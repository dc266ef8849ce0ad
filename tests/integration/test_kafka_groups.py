"""Consumer groups on the Kafka port with real clients: confluent-kafka (librdkafka) and kafka-python members
joining, leaving and being SIGKILLed while records flow. Every assignment change goes into one timeline
(on_assign / on_revoke, a subprocess member's too) that must never show a partition owned by two members at
once, and a monitor reads the committed offsets throughout: they never move backwards.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.helpers import wait_until
from txnsim import Admin, LocalCluster

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 6
#: short enough that a SIGKILLed member's partitions move within a test's patience
SESSION_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("groups"), txn_shards=4, offsets_shards=4,
                      group_min_session_timeout_ms=500, group_initial_rebalance_delay_ms=300) as c:
        yield c


_names = iter(range(10**6))


@pytest.fixture
def topic(cluster, request) -> str:
    name = f"g{next(_names)}-{request.node.name[:30]}"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(name, partitions=PARTITIONS)
    return name


def consumer_config(cluster, group: str, **extra) -> dict:
    return {"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 200, "max.poll.interval.ms": 20000,
            "enable.auto.commit": True, "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, **extra}


class Timeline:
    """Assignment events of every member, stamped with wall-clock time (shared by subprocesses)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[float, str, str, tuple[int, ...]]] = []

    def record(self, member: str, kind: str, partitions: list[int], at: float | None = None) -> None:
        with self._lock:
            self.events.append((time.time() if at is None else at, member, kind, tuple(sorted(partitions))))

    def owners(self) -> dict[int, str]:
        """Who owns each partition now (by the events so far, in time order)."""
        owner: dict[int, str] = {}
        with self._lock:
            events = sorted(self.events)
        for _, member, kind, partitions in events:
            if kind == "assign":
                owner.update(dict.fromkeys(partitions, member))
            elif kind == "revoke":
                for p in partitions:
                    if owner.get(p) == member:
                        del owner[p]
            elif kind == "dead":
                owner = {p: m for p, m in owner.items() if m != member}
        return owner

    def overlaps(self) -> list[str]:
        """Every moment a partition was assigned to a member while another still owned it."""
        owner: dict[int, str] = {}
        found = []
        with self._lock:
            events = sorted(self.events)
        for at, member, kind, partitions in events:
            if kind == "assign":
                for p in partitions:
                    if owner.get(p, member) != member:
                        found.append(f"{at:.3f}: partition {p} assigned to {member} while {owner[p]} owns it")
                    owner[p] = member
            elif kind == "revoke":
                for p in partitions:
                    if owner.get(p) == member:
                        del owner[p]
            elif kind == "dead":
                owner = {p: m for p, m in owner.items() if m != member}
        return found


class Member(threading.Thread):
    """A confluent-kafka consumer polling in its own thread; its rebalance callbacks feed the timeline."""

    def __init__(self, name: str, config: dict, topic: str, timeline: Timeline) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = Consumer(config)
        self.timeline = timeline
        self.stopping = threading.Event()
        self.consumed = 0
        self.error: BaseException | None = None
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.timeline.record(self.name, "assign", [tp.partition for tp in partitions])

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.timeline.record(self.name, "revoke", [tp.partition for tp in partitions])

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                message = self.consumer.poll(0.1)
                if message is not None and message.error() is None:
                    self.consumed += 1
            self.consumer.close()  # eager: revokes (committing) and leaves
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


SUBPROCESS_MEMBER = r"""
import json, sys, time
from confluent_kafka import Consumer
config, topic, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
def say(kind, partitions):
    print(json.dumps({"at": time.time(), "kind": kind, "partitions": [tp.partition for tp in partitions]}), flush=True)
consumer = Consumer(config)
consumer.subscribe([topic], on_assign=lambda c, ps: say("assign", ps), on_revoke=lambda c, ps: say("revoke", ps))
while True:
    consumer.poll(0.1)
"""


class SubprocessMember:
    """A confluent-kafka consumer in its own process, so that it can be SIGKILLed; it prints its callbacks."""

    def __init__(self, name: str, config: dict, topic: str, timeline: Timeline) -> None:
        self.name, self.timeline = name, timeline
        self.process = subprocess.Popen([sys.executable, "-c", SUBPROCESS_MEMBER, json.dumps(config), topic, name],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            self.timeline.record(self.name, event["kind"], event["partitions"], at=event["at"])

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.reader.join(10)
        self.timeline.record(self.name, "dead", [])


class CommitMonitor(threading.Thread):
    """Reads the group's committed offsets every 50 ms; any offset lower than one seen before is a violation."""

    def __init__(self, cluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": group,
                                  "enable.auto.commit": False})
        self.tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.highest: dict[int, int] = {}
        self.violations: list[str] = []
        self.stopping = threading.Event()

    def read(self) -> dict[int, int]:
        committed = {tp.partition: tp.offset for tp in self.consumer.committed(self.tps, timeout=10)}
        for p, offset in committed.items():
            if offset >= 0:
                if offset < self.highest.get(p, -1):
                    self.violations.append(f"partition {p}: committed {offset} after {self.highest[p]}")
                self.highest[p] = max(offset, self.highest.get(p, -1))
        return committed

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            try:
                self.read()
            except KafkaException:  # a timeout or a coordinator moving: read again
                continue

    def stop(self) -> None:
        self.stopping.set()
        self.join(20)
        self.consumer.close()


class Traffic(threading.Thread):
    """Records to every partition until stopped; `sent` per partition once flushed."""

    def __init__(self, cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "linger.ms": 5})
        self.topic = topic
        self.sent = [0] * PARTITIONS
        self.stopping = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(0.005):
            self.producer.produce(self.topic, value=b"%d" % i, partition=i % PARTITIONS)
            self.sent[i % PARTITIONS] += 1
            self.producer.poll(0)
            i += 1
        assert self.producer.flush(20) == 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def owned_by(timeline: Timeline, members: set[str]) -> Callable[[], bool]:
    """All partitions owned, each by one of `members`, and every member owning some."""
    def check() -> bool:
        owners = timeline.owners()
        return len(owners) == PARTITIONS and set(owners.values()) == members
    return check


@pytest.mark.slow
def test_members_join_leave_and_die_without_sharing_a_partition_or_moving_a_commit_back(cluster, topic):
    group = f"{topic}-app"
    timeline = Timeline()
    traffic, monitor = Traffic(cluster, topic), CommitMonitor(cluster, group, topic)
    traffic.start()
    monitor.start()
    a = Member("a", consumer_config(cluster, group), topic, timeline)
    a.start()
    wait_until(owned_by(timeline, {"a"}), 20, "a owning every partition")
    b = Member("b", consumer_config(cluster, group), topic, timeline)
    b.start()
    wait_until(owned_by(timeline, {"a", "b"}), 20, "a and b sharing the partitions")
    c = SubprocessMember("c", consumer_config(cluster, group), topic, timeline)
    wait_until(owned_by(timeline, {"a", "b", "c"}), 30, "a, b and c sharing the partitions")
    b.stop()  # leaves the group
    wait_until(owned_by(timeline, {"a", "c"}), 20, "a and c sharing the partitions after b left")
    c.kill()  # no LeaveGroup: its session expires
    wait_until(owned_by(timeline, {"a"}), 30, "a owning every partition after c was killed")
    traffic.stop()
    wait_until(lambda: [monitor.highest.get(p, -1) for p in range(PARTITIONS)] == traffic.sent, 30,
               "a committing every record")
    a.stop()
    monitor.stop()
    assert timeline.overlaps() == []
    assert monitor.violations == []
    assert a.consumed > 0


def test_commit_and_committed_and_a_new_member_resumes_there(cluster, topic):
    group = f"{topic}-app"
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(30):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(20) == 0
    consumer = Consumer(consumer_config(cluster, group, **{"enable.auto.commit": False}))
    consumer.subscribe([topic])
    seen = []
    wait_until(lambda: (m := consumer.poll(0.2)) is not None and m.error() is None and seen.append(m) is None
               and len(seen) >= 5, 30, "five records")
    last = seen[-1]
    consumer.commit(message=last, asynchronous=False)
    (committed,) = consumer.committed([TopicPartition(topic, last.partition())], timeout=10)
    assert committed.offset == last.offset() + 1
    consumer.close()
    again = Consumer(consumer_config(cluster, group))
    again.subscribe([topic])
    first = {}
    wait_until(lambda: (m := again.poll(0.2)) is not None and m.error() is None
               and first.setdefault(m.partition(), m.offset()) is not None and last.partition() in first,
               30, "the committed partition read again")
    assert first[last.partition()] == last.offset() + 1
    again.close()


def test_a_static_member_restarting_within_its_session_keeps_its_partitions_without_a_rebalance(cluster, topic):
    group = f"{topic}-app"
    timeline = Timeline()
    static = {"session.timeout.ms": 6000}
    s1 = Member("s1", consumer_config(cluster, group, **static, **{"group.instance.id": "one"}), topic, timeline)
    s2 = Member("s2", consumer_config(cluster, group, **static, **{"group.instance.id": "two"}), topic, timeline)
    s1.start()
    s2.start()
    wait_until(owned_by(timeline, {"s1", "s2"}), 30, "s1 and s2 sharing the partitions")
    before = timeline.owners()
    mine = sorted(p for p, m in before.items() if m == "s1")
    s2_events = [e for e in timeline.events if e[1] == "s2"]
    s1.stop()  # a static member's close sends no LeaveGroup (KIP-345)
    timeline.record("s1", "dead", [])
    restarted = Member("s1b", consumer_config(cluster, group, **static, **{"group.instance.id": "one"}), topic,
                       timeline)
    restarted.start()
    wait_until(lambda: sorted(p for p, m in timeline.owners().items() if m == "s1b") == mine, 20,
               "the restarted static member getting its old partitions")
    assert [e for e in timeline.events if e[1] == "s2"] == s2_events  # s2 saw no rebalance
    restarted.stop()
    s2.stop()
    assert timeline.overlaps() == []


def test_kafka_python_and_confluent_kafka_members_share_a_group(cluster, topic):
    from kafka import KafkaConsumer

    group = f"{topic}-app"
    timeline = Timeline()
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(60):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(20) == 0
    confluent = Member("confluent", consumer_config(cluster, group), topic, timeline)
    confluent.start()
    wait_until(owned_by(timeline, {"confluent"}), 20, "the confluent member owning every partition")
    consumed = []
    stopping = threading.Event()

    def kafka_python_member() -> None:
        consumer = KafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap_servers, group_id=group,
                                 auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300,
                                 enable_auto_commit=True, auto_commit_interval_ms=200)
        while not stopping.is_set():
            for records in consumer.poll(timeout_ms=100).values():
                consumed.extend(records)
            owned = sorted(tp.partition for tp in consumer.assignment())
            if [e[3] for e in timeline.events if e[1] == "kafka-python"][-1:] != [tuple(owned)]:
                timeline.record("kafka-python", "assign" if owned else "revoke", owned)
        consumer.close()

    thread = threading.Thread(target=kafka_python_member, daemon=True)
    thread.start()
    wait_until(owned_by(timeline, {"confluent", "kafka-python"}), 30, "both clients sharing the partitions")
    mine = {p for p, m in timeline.owners().items() if m == "kafka-python"}
    for i in range(60):  # the confluent member read (and committed) the first ones alone
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(20) == 0
    wait_until(lambda: {r.partition for r in consumed} == mine, 30, "kafka-python reading its partitions")
    stopping.set()
    thread.join(30)
    confluent.stop()


# ---------------------------------------------------------------- txnsim's own consumer (gRPC), same coordinator

class TxnsimMember(threading.Thread):
    """txnsim's Consumer polling in its own thread; its ConsumerRebalanceListener feeds the timeline."""

    def __init__(self, name: str, cluster, group: str, topic: str, timeline: Timeline) -> None:
        from txnsim import Consumer as TxnsimConsumer

        super().__init__(name=name, daemon=True)
        self.consumer = TxnsimConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                       auto_offset_reset="earliest", enable_auto_commit=True,
                                       auto_commit_interval_ms=100, session_timeout_ms=SESSION_MS,
                                       heartbeat_interval_ms=200, metadata_max_age_ms=1000)
        self.timeline = timeline
        self.stopping = threading.Event()
        self.consumed = 0
        self.error: BaseException | None = None
        member = self

        class Listener:
            def on_partitions_revoked(self, revoked: set) -> None:
                member.timeline.record(member.name, "revoke", [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: set) -> None:
                member.timeline.record(member.name, "assign", [tp.partition for tp in assigned])
        self.consumer.subscribe([topic], listener=Listener())

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.consumed += sum(len(rs) for rs in self.consumer.poll(timeout_ms=100).values())
            self.consumer.close()  # revokes (committing) and leaves
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


def test_txnsim_members_never_read_a_partition_at_the_same_time_as_another(cluster, topic):
    """Bug (1): a member joining used to get partitions another member was still reading."""
    group = f"{topic}-app"
    timeline = Timeline()
    traffic = Traffic(cluster, topic)
    traffic.start()
    a = TxnsimMember("a", cluster, group, topic, timeline)
    a.start()
    wait_until(owned_by(timeline, {"a"}), 20, "a owning every partition")
    b = TxnsimMember("b", cluster, group, topic, timeline)
    b.start()
    wait_until(owned_by(timeline, {"a", "b"}), 20, "a and b sharing the partitions")
    c = TxnsimMember("c", cluster, group, topic, timeline)
    c.start()
    wait_until(owned_by(timeline, {"a", "b", "c"}), 20, "a, b and c sharing the partitions")
    b.stop()
    wait_until(owned_by(timeline, {"a", "c"}), 20, "a and c sharing the partitions after b left")
    traffic.stop()
    a.stop()
    c.stop()
    assert timeline.overlaps() == []
    assert a.consumed and c.consumed


def test_an_auto_committing_txnsim_member_never_moves_anothers_commit_back(cluster, topic):
    """Bug (2): a member rejoining used to auto-commit its old positions of partitions it had lost."""
    group = f"{topic}-app"
    timeline = Timeline()
    traffic, monitor = Traffic(cluster, topic), CommitMonitor(cluster, group, topic)
    traffic.start()
    monitor.start()
    a = TxnsimMember("a", cluster, group, topic, timeline)
    a.start()
    wait_until(owned_by(timeline, {"a"}), 20, "a owning every partition")
    wait_until(lambda: len(monitor.highest) == PARTITIONS, 20, "a committing every partition")
    for name in ("b", "c"):  # each join moves partitions away from members that keep auto-committing
        joiner = TxnsimMember(name, cluster, group, topic, timeline)
        joiner.start()
        wait_until(owned_by(timeline, {"a", name}), 20, f"a and {name} sharing the partitions")
        wait_until(lambda j=joiner: j.consumed > 0, 20, f"{name} reading")
        joiner.stop()
        wait_until(owned_by(timeline, {"a"}), 20, f"a owning every partition after {name} left")
    traffic.stop()
    wait_until(lambda: [monitor.highest.get(p, -1) for p in range(PARTITIONS)] == traffic.sent, 30,
               "a committing every record")
    a.stop()
    monitor.stop()
    assert monitor.violations == []
    assert timeline.overlaps() == []


@pytest.mark.slow
def test_a_stable_group_survives_its_coordinator_killed_without_a_rebalance(tmp_path):
    """Membership is in __consumer_offsets: the next owner serves the same generation and assignments."""
    from client.cluster import GROUP
    from client.transport import call
    from proto import txnsim_pb2 as pb

    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", txn_shards=4, offsets_shards=4,
                      group_min_session_timeout_ms=500, group_initial_rebalance_delay_ms=300) as fresh:
        with Admin(fresh.bootstrap_servers) as admin:
            admin.create_topic("orders", partitions=PARTITIONS)
        group = "survivors"
        timeline = Timeline()
        traffic, monitor = Traffic(fresh, "orders"), CommitMonitor(fresh, group, "orders")
        members = [Member(name, consumer_config(fresh, group, **{"session.timeout.ms": 6000}), "orders", timeline)
                   for name in ("a", "b")]
        for m in members:
            m.start()
        wait_until(owned_by(timeline, {"a", "b"}), 30, "a and b sharing the partitions")
        traffic.start()
        monitor.start()
        wait_until(lambda: len(monitor.highest) == PARTITIONS, 20, "commits of every partition")
        events_before = len(timeline.events)
        request = pb.FindCoordinatorRequest(key_type=GROUP, key=group)
        coordinator = fresh.client.any_node(lambda s: call(s.cluster.FindCoordinator, request, 5.0)).node_id
        fresh.kill(coordinator)
        committed_at_kill = dict(monitor.highest)
        wait_until(lambda: all(monitor.highest.get(p, -1) > committed_at_kill[p] for p in range(PARTITIONS)), 30,
                   "commits moving on through the new coordinator")
        after_failover = timeline.events[events_before:]
        traffic.stop()
        for m in members:
            m.stop()
        monitor.stop()
        assert after_failover == []  # no rebalance: the same generation and assignments went on
        assert monitor.violations == [] and timeline.overlaps() == []


def test_aiokafka_and_confluent_kafka_members_share_a_group(cluster, topic):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    group = f"{topic}-app"
    timeline = Timeline()
    confluent = Member("confluent", consumer_config(cluster, group), topic, timeline)
    confluent.start()
    wait_until(owned_by(timeline, {"confluent"}), 20, "the confluent member owning every partition")
    consumed: list = []
    stopping = threading.Event()

    async def aiokafka_member() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap_servers, group_id=group,
                                    auto_offset_reset="earliest", session_timeout_ms=6000,
                                    heartbeat_interval_ms=300)
        await consumer.start()
        try:
            while not stopping.is_set():
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    consumed.extend(records)
                owned = sorted(tp.partition for tp in consumer.assignment())
                if [e[3] for e in timeline.events if e[1] == "aiokafka"][-1:] != [tuple(owned)]:
                    timeline.record("aiokafka", "assign" if owned else "revoke", owned)
        finally:
            await consumer.stop()

    thread = threading.Thread(target=lambda: asyncio.run(aiokafka_member()), daemon=True)
    thread.start()
    wait_until(owned_by(timeline, {"confluent", "aiokafka"}), 30, "both clients sharing the partitions")
    mine = {p for p, m in timeline.owners().items() if m == "aiokafka"}
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(60):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(20) == 0
    wait_until(lambda: {r.partition for r in consumed} == mine, 30, "aiokafka reading its partitions")
    stopping.set()
    thread.join(30)
    confluent.stop()


def test_a_txnsim_pattern_subscription_picks_up_a_topic_created_later(cluster, topic):
    from txnsim import Consumer as TxnsimConsumer

    prefix = f"{topic}-p"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(f"{prefix}-a", partitions=2)
        with TxnsimConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=f"{prefix}-app",
                            metadata_max_age_ms=200, session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=200) as consumer:
            consumer.subscribe(pattern=rf"{prefix}-.*")

            def topics() -> set[str]:
                consumer.poll(timeout_ms=50)
                return {tp.topic for tp in consumer.assignment()}
            wait_until(lambda: topics() == {f"{prefix}-a"}, 20, "the matching topic assigned")
            admin.create_topic(f"{prefix}-b", partitions=2)
            wait_until(lambda: topics() == {f"{prefix}-a", f"{prefix}-b"}, 20, "the new topic assigned too")
            assert consumer.subscription() == {f"{prefix}-a", f"{prefix}-b"}


def test_confluent_admin_lists_describes_and_deletes_groups(cluster, topic):
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    group = f"{topic}-app"
    timeline = Timeline()
    member = Member("m", consumer_config(cluster, group), topic, timeline)
    member.start()
    wait_until(owned_by(timeline, {"m"}), 20, "the member owning every partition")
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    listed = admin.list_consumer_groups().result(10)
    assert (group, ConsumerGroupState.STABLE) in {(g.group_id, g.state) for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert (described.state, described.partition_assignor) == (ConsumerGroupState.STABLE, "range")
    (only,) = described.members
    assert sorted(tp.partition for tp in only.assignment.topic_partitions) == list(range(PARTITIONS))
    assert only.host == "/127.0.0.1"  # the member's connection, as Kafka shows it
    with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    member.stop()
    wait_until(lambda: admin.describe_consumer_groups([group])[group].result(10).state == ConsumerGroupState.EMPTY,
               20, "the group empty after its member left")
    emptied = admin.describe_consumer_groups([group])[group].result(10)
    assert not emptied.is_simple_consumer_group  # Kafka keeps the protocol type "consumer" of an Empty group
    assert admin.delete_consumer_groups([group], request_timeout=10)[group].result() is None
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


@pytest.mark.slow
def test_cooperative_sticky_members_give_up_only_the_partitions_that_move(cluster, topic):
    """KIP-429 over the same classic protocol: incremental revocations, two rebalances, still no overlap."""
    group = f"{topic}-app"
    timeline = Timeline()
    traffic, monitor = Traffic(cluster, topic), CommitMonitor(cluster, group, topic)
    traffic.start()
    monitor.start()

    def member(name: str) -> Member:
        config = consumer_config(cluster, group, **{"partition.assignment.strategy": "cooperative-sticky"})
        started = Member(name, config, topic, timeline)
        started.start()
        return started
    a = member("a")
    wait_until(owned_by(timeline, {"a"}), 20, "a owning every partition")
    b = member("b")
    wait_until(owned_by(timeline, {"a", "b"}), 20, "a and b sharing the partitions")
    c = member("c")
    wait_until(owned_by(timeline, {"a", "b", "c"}), 20, "a, b and c sharing the partitions")
    b.stop()
    wait_until(owned_by(timeline, {"a", "c"}), 20, "a and c sharing the partitions after b left")
    traffic.stop()
    wait_until(lambda: [monitor.highest.get(p, -1) for p in range(PARTITIONS)] == traffic.sent, 30,
               "every record committed")
    a.stop()
    c.stop()
    monitor.stop()
    assert timeline.overlaps() == [] and monitor.violations == []
    a_revoked = [len(e[3]) for e in timeline.events if e[1] == "a" and e[2] == "revoke" and e[3]]
    assert a_revoked and a_revoked[0] < PARTITIONS  # a kept what did not move
