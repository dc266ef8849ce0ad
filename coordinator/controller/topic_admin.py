"""Topics of a replicated cluster, kept in the coordination store as Kafka kept them in ZooKeeper: the replica
assignment at /brokers/topics/<topic>, the topic's settings at /config/topics/<topic> ({"version": 1,
"config": {...}}). A topic is created in one multi-op, both znodes or neither; the controller then gives each
partition its first leader and ISR (controller.py). Describing a topic reads the assignment, every
partition's state and the live brokers, and says what kafka-topics --describe says: leader, replicas, ISR,
and which replicas are offline.

Partitions are added by rewriting the assignment znode (conditionally on its version), as Kafka's
AdminZkClient.createPartitions does; the controller watches each topic's assignment and gives the new
partitions their first leaders.

Calls take a `done` callback as the store does; errors are Kafka's: TOPIC_ALREADY_EXISTS,
INVALID_REPLICATION_FACTOR (more replicas than live brokers), INVALID_PARTITIONS, INVALID_CONFIG,
UNKNOWN_TOPIC_OR_PARTITION, and REQUEST_TIMED_OUT while the store cannot be reached.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.controller.elections import assign_replicas
from coordinator.controller.store import (
    BadVersionError,
    CoordinationStore,
    Create,
    NodeExistsError,
    NoNodeError,
    StoreError,
    StoreUnavailableError,
    Znode,
)
from coordinator.controller.znodes import (
    BROKER_IDS,
    DELETE_TOPICS,
    NO_LEADER,
    TOPICS,
    PartitionState,
    decode_assignment,
    deletion_path,
    encode_assignment,
    partition_state_path,
    topic_path,
)
from coordinator.topics import check_new_topic
from proto.errors import (
    InvalidPartitionsError,
    KafkaError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)

CONFIG_TOPICS = "/config/topics"
#: a topic's replication factor when CreateTopics leaves it to the cluster (-1): Kafka's
#: default.replication.factor is 1; txnsim's is 3, or every live broker when there are fewer
DEFAULT_REPLICATION_FACTOR = 3


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(sorted(configs.items()))}).encode()


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    #: -1 while the partition has no leader (offline), or before the controller gave it its first
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: replicas on brokers that are not registered (not live)
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


Done = Callable[[object], None]


def _kafka_error(error: object, what: str) -> KafkaError:
    if isinstance(error, StoreUnavailableError):
        return RequestTimedOutError(f"[REQUEST_TIMED_OUT] {what}: the coordination service cannot be reached "
                                    f"({error}); try again once it is back")
    return UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {what}: {error}")


class TopicAdmin:
    """CreateTopics and describe over one member's session with the store."""

    def __init__(self, store: CoordinationStore) -> None:
        self._store = store

    def create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None,
               done: Done, *, internal: bool = False, placed_as: str | None = None) -> None:
        """Create `name` with `partitions` partitions of `replication_factor` replicas each (-1: the cluster's
        default), spread over the live brokers as Kafka spreads them: done(the assignment) or done(error).
        `internal`: one of the cluster's own topics (__transaction_state, ...), created by the brokers;
        `placed_as`: spread as that topic's partitions are (the three logs of a half-message shard lead together)."""
        try:
            settings = dict(configs or {}) if internal else check_new_topic(name, partitions, configs)
        except KafkaError as error:
            done(error)
            return

        def brokers(outcome: object) -> None:
            if not isinstance(outcome, list):
                done(_kafka_error(outcome, f"cannot create topic {name!r}"))
                return
            live = sorted(int(broker) for broker in outcome)
            factor = min(DEFAULT_REPLICATION_FACTOR, len(live)) if replication_factor == -1 else replication_factor
            try:
                assignment = assign_replicas(partitions, factor, live, start_index=_start(placed_as or name, live))
            except KafkaError as error:
                done(error)
                return
            self._store.ensure_path(CONFIG_TOPICS, lambda _o: self._store.ensure_path(TOPICS, lambda _o2: (
                self._store.commit([Create(topic_path(name), encode_assignment(assignment)),
                                    Create(config_path(name), encode_topic_config(settings))],
                                   lambda result: created(result, assignment)))))

        def created(outcome: object, assignment: dict[int, tuple[int, ...]]) -> None:
            if isinstance(outcome, list):
                done(assignment)
            elif isinstance(outcome, NodeExistsError):
                done(TopicAlreadyExistsError(f"[TOPIC_ALREADY_EXISTS] topic {name!r} already exists"))
            else:
                done(_kafka_error(outcome, f"cannot create topic {name!r}"))
        self._store.children(BROKER_IDS, brokers)

    def add_partitions(self, name: str, total: int, done: Done) -> None:
        """Grow `name` to `total` partitions: the new ones spread over the live brokers as Kafka's
        CreatePartitions spreads them (the assignment continued from the topic's first partition's leader,
        the replication factor kept), the assignment written conditionally on its znode's version (a
        concurrent change makes this one start over). The controller gives each new partition its first
        leader. done(the whole assignment) or done(UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR, or a store error)."""
        def brokers(outcome: object) -> None:
            if not isinstance(outcome, list):
                done(_kafka_error(outcome, f"cannot add partitions to topic {name!r}"))
                return
            live = sorted(int(broker) for broker in outcome)

            def grown(znode: Znode) -> tuple[bytes, object]:
                current = decode_assignment(znode.data)
                if total <= len(current):
                    raise InvalidPartitionsError(
                        f"[INVALID_PARTITIONS] topic {name!r} has {len(current)} partitions; {total} would not be "
                        "an increase")
                first = current[0][0] if current else -1
                whole = assign_replicas(total, len(current[0]), live,
                                        start_index=live.index(first) if first in live else _start(name, live))
                assignment = {**current, **{p: whole[p] for p in range(len(current), total)}}
                return encode_assignment(assignment), assignment
            self._update(topic_path(name), name, "add partitions to", grown, done)
        self._store.children(BROKER_IDS, brokers)

    def delete(self, name: str, done: Done) -> None:
        """Mark `name` for deletion (topic_deletion.py): done(None) once marked (or already marked), or
        done(UNKNOWN_TOPIC_OR_PARTITION / a store error)."""
        def exists(_znode: Znode) -> None:
            self._store.ensure_path(DELETE_TOPICS, lambda _o: self._store.create(deletion_path(name), b"", marked))

        def marked(outcome: object) -> None:
            if isinstance(outcome, StoreError) and not isinstance(outcome, NodeExistsError):
                done(_kafka_error(outcome, f"cannot delete topic {name!r}"))
            else:
                done(None)
        self._store.get(topic_path(name), functools.partial(_read, name, "delete", exists, done))

    def change_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]], done: Done) -> None:
        """The topic's settings become `change(current)`, written conditionally on the settings znode's version
        (a concurrent change makes this one read again and reapply, as Kafka's AdminZkClient retries):
        done(new settings) or done(UNKNOWN_TOPIC_OR_PARTITION, a KafkaError `change` raised, or a store error)."""
        def changed(znode: Znode) -> tuple[bytes, object]:
            new = change(decode_topic_config(znode.data))
            return encode_topic_config(new), new
        self._update(config_path(name), name, "change the settings of", changed, done)

    def _update(self, path: str, name: str, what: str, change: Callable[[Znode], tuple[bytes, object]],
                done: Done) -> None:
        """Read `path`, write `change(znode)`'s bytes conditionally on the version read, and done(its result);
        a concurrent write makes it read and change again. UNKNOWN_TOPIC_OR_PARTITION if the znode is
        missing; a KafkaError `change` raises goes to done as it is."""
        def changed(znode: Znode) -> None:
            try:
                data, result = change(znode)
            except KafkaError as error:
                done(error)
                return
            self._store.set(path, data, lambda outcome: written(outcome, result), version=znode.version)

        def written(outcome: object, result: object) -> None:
            if isinstance(outcome, BadVersionError):
                self._store.get(path, read)
            elif isinstance(outcome, StoreError):
                done(_kafka_error(outcome, f"cannot {what} topic {name!r}"))
            else:
                done(result)
        read = functools.partial(_read, name, what, changed, done)
        self._store.get(path, read)

    def describe(self, name: str, done: Done) -> None:
        """done(TopicDescription) or done(UNKNOWN_TOPIC_OR_PARTITION / REQUEST_TIMED_OUT)."""
        _Describe(self._store, name, done).start()

    def list_topics(self, done: Done) -> None:
        """done(sorted topic names) or done(REQUEST_TIMED_OUT)."""
        def listed(outcome: object) -> None:
            if isinstance(outcome, NoNodeError):
                done([])
            elif isinstance(outcome, list):
                done(sorted(outcome))
            else:
                done(_kafka_error(outcome, "cannot list topics"))
        self._store.children(TOPICS, listed)


class _Describe:
    """One describe's reads, one after another: the assignment, the settings, the live brokers, then every
    partition's state; answered once, when the last state is in (or at the first failure)."""

    def __init__(self, store: CoordinationStore, name: str, done: Done) -> None:
        self._store, self._name, self._done = store, name, done
        self._replicas: dict[int, tuple[int, ...]] = {}
        self._configs: dict[str, str] = {}
        self._live: frozenset[int] = frozenset()
        self._states: dict[int, PartitionState | None] = {}
        self._answered = False

    def start(self) -> None:
        self._store.get(topic_path(self._name), self._assignment)

    def _fail(self, error: KafkaError) -> None:
        if not self._answered:
            self._answered = True
            self._done(error)

    def _assignment(self, outcome: object) -> None:
        if isinstance(outcome, NoNodeError):
            self._fail(UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {self._name!r} does not "
                                                    "exist"))
        elif not isinstance(outcome, Znode):
            self._fail(_kafka_error(outcome, f"cannot describe topic {self._name!r}"))
        else:
            self._replicas = decode_assignment(outcome.data)
            self._store.get(config_path(self._name), self._settings)

    def _settings(self, outcome: object) -> None:
        self._configs = decode_topic_config(outcome.data) if isinstance(outcome, Znode) else {}
        self._store.children(BROKER_IDS, self._brokers)

    def _brokers(self, outcome: object) -> None:
        if not isinstance(outcome, list):
            self._fail(_kafka_error(outcome, f"cannot describe topic {self._name!r}"))
            return
        self._live = frozenset(int(broker) for broker in outcome)
        for partition in sorted(self._replicas):
            self._store.get(partition_state_path(self._name, partition), functools.partial(self._state, partition))

    def _state(self, partition: int, outcome: object) -> None:
        if isinstance(outcome, StoreError) and not isinstance(outcome, NoNodeError):
            self._fail(_kafka_error(outcome, f"cannot describe topic {self._name!r}"))
            return
        self._states[partition] = PartitionState.decode(outcome.data) if isinstance(outcome, Znode) else None
        if len(self._states) < len(self._replicas) or self._answered:
            return
        self._answered = True
        self._done(TopicDescription(self._name, tuple(
            _describe(p, self._replicas[p], self._states[p], self._live) for p in sorted(self._replicas)),
            self._configs))


def _describe(partition: int, replicas: tuple[int, ...], state: PartitionState | None,
              live: frozenset[int]) -> PartitionDescription:
    offline = tuple(r for r in replicas if r not in live)
    if state is None:
        return PartitionDescription(partition, NO_LEADER, -1, replicas, (), offline)
    return PartitionDescription(partition, state.leader, state.leader_epoch, replicas, state.isr, offline)


def _read(name: str, what: str, then: Callable[[Znode], None], done: Done, outcome: object) -> None:
    """A topic's znode as read: `then(znode)`, or done(UNKNOWN_TOPIC_OR_PARTITION / a store error)."""
    if isinstance(outcome, NoNodeError):
        done(UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist"))
    elif isinstance(outcome, Znode):
        then(outcome)
    else:
        done(_kafka_error(outcome, f"cannot {what} topic {name!r}"))


def _start(name: str, live: list[int]) -> int:
    """Where a topic's first partition's leader goes: spread by name, so that topics created one after another
    do not all lead from the same broker (Kafka picks it at random; a hash keeps runs repeatable)."""
    return sum(name.encode()) % len(live) if live else 0
