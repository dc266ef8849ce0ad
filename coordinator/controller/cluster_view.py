"""One broker's picture of a replicated cluster, read from the coordination store and kept current by its
watches: the live brokers and their addresses, every topic's replica assignment and settings, and every
partition's state (leader, leader epoch, ISR).

It is what a broker answers Metadata and FindCoordinator from and who it calls to reach a node, as Kafka's
brokers answered from the metadata cache the controller's UpdateMetadata requests filled. The states of the
partitions this broker holds a replica of are handed on to its ReplicaManager as they come (`on_state`).
Readers on request threads see whole values: the store's answers are applied one at a time (`serial`) and
each table is swapped under a lock.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from types import MappingProxyType

from coordinator.controller.controller import Serial
from coordinator.controller.store import CoordinationStore, SessionEvent, Znode
from coordinator.controller.topic_admin import config_path, decode_topic_config
from coordinator.controller.znodes import BROKER_IDS, BrokerInfo, PartitionState, broker_path
from coordinator.replication.state_watch import OnState, PartitionStateWatch
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

LiveChange = Callable[[frozenset[int], frozenset[int]], None]


class ClusterView:
    def __init__(self, broker_id: int, store: CoordinationStore, serial: Serial, *, on_state: OnState,
                 on_session_expired: Callable[[], None]) -> None:
        self.broker_id = broker_id
        self._store = store
        self._serial = serial
        self._on_state = on_state
        self._lock = threading.RLock()  # re-entered by wait_for's predicate
        #: notified after every change, for callers that wait for the store's word to arrive (wait_for)
        self._changed = threading.Condition(self._lock)
        self._brokers: dict[int, BrokerInfo] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._configs: dict[str, MappingProxyType[str, str]] = {}
        self._live_listeners: list[LiveChange] = []
        self._topic_listeners: list[Callable[[str], None]] = []
        self._gone_listeners: list[Callable[[str], object]] = []
        self._watch = PartitionStateWatch(broker_id, store, serial, on_state=self._state,
                                          on_session_expired=on_session_expired, every_partition=True,
                                          on_topic=self._new_topic, on_topic_gone=self._topic_gone)
        #: topics whose settings znode is watched (once each: the watch outlives a deletion)
        self._configs_watched: set[str] = set()
        store.on_session(lambda event: serial(lambda: self._session(event)))

    def start(self) -> None:
        self._watch.start()
        self._serial(lambda: self._store.ensure_path(BROKER_IDS, self._answered(lambda _o: self._watch_brokers())))

    def on_live_change(self, listener: LiveChange) -> None:
        """Told (old live set, new live set) whenever a broker registers or its registration goes."""
        self._live_listeners.append(listener)

    def on_topic(self, listener: Callable[[str], None]) -> None:
        """Told the name of each topic the first time this view reads it."""
        self._topic_listeners.append(listener)

    def on_topic_gone(self, listener: Callable[[str], object]) -> None:
        """Told the name of each topic whose assignment this view sees deleted (the topic's deletion is done)."""
        self._gone_listeners.append(listener)

    # ------------------------------------------------------------ what readers ask

    @property
    def live(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._brokers)

    def brokers(self) -> dict[int, BrokerInfo]:
        with self._lock:
            return dict(self._brokers)

    def address_of(self, broker_id: int) -> str:
        with self._lock:
            info = self._brokers.get(broker_id)
        if info is None:
            raise KeyError(f"broker {broker_id} is not registered")
        return info.address

    def kafka_address_of(self, broker_id: int) -> str | None:
        with self._lock:
            info = self._brokers.get(broker_id)
        return info.kafka_address or None if info is not None else None

    def owner(self, topic: str, partition: int) -> int:
        """The partition's leader as the controller last wrote it (-1: none, or not known yet)."""
        with self._lock:
            state = self._states.get(TopicPartition(topic, partition))
        return state.leader if state is not None else -1

    def state(self, topic: str, partition: int) -> PartitionState | None:
        with self._lock:
            return self._states.get(TopicPartition(topic, partition))

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        return self._watch.assignments.get(topic, {}).get(partition, ())

    def topics(self) -> dict[str, int]:
        """Every topic read so far and its partition count."""
        return {topic: len(assignment) for topic, assignment in list(self._watch.assignments.items()) if assignment}

    def partitions(self, topic: str) -> int | None:
        assignment = self._watch.assignments.get(topic)
        return len(assignment) if assignment else None

    def configs(self, topic: str) -> MappingProxyType[str, str]:
        with self._lock:
            return self._configs.get(topic, MappingProxyType({}))

    def wait_for(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Block until `ready()` holds (asked after every change), or `timeout_s` passed: whether it holds."""
        with self._changed:
            return self._changed.wait_for(ready, timeout_s)

    # ------------------------------------------------------------ the store's word

    def _session(self, event: SessionEvent) -> None:
        if event is SessionEvent.CONNECTED:
            self._configs_watched.clear()  # the topics are read afresh (state_watch.py): their settings too
            self._watch_brokers()

    def _state(self, tp: TopicPartition, replicas: tuple[int, ...], state: PartitionState, version: int) -> None:
        with self._lock:
            self._states[tp] = state
            self._changed.notify_all()
        if self.broker_id in replicas:
            self._on_state(tp, replicas, state, version)

    def _new_topic(self, topic: str) -> None:
        if topic not in self._configs_watched:
            self._configs_watched.add(topic)
            self._watch_config(topic)
        for listener in self._topic_listeners:
            listener(topic)

    def _topic_gone(self, topic: str) -> None:
        with self._lock:
            for tp in [tp for tp in self._states if tp.topic == topic]:
                del self._states[tp]
            self._configs.pop(topic, None)
            self._changed.notify_all()
        for listener in self._gone_listeners:
            listener(topic)

    def _watch_config(self, topic: str) -> None:
        self._store.get(config_path(topic), self._answered(functools.partial(self._config, topic)),
                        watch=lambda: self._serial(lambda: self._watch_config(topic)))

    def _config(self, topic: str, outcome: object) -> None:
        if isinstance(outcome, Znode):
            with self._lock:
                self._configs[topic] = MappingProxyType(decode_topic_config(outcome.data))

    def _watch_brokers(self) -> None:
        self._store.children(BROKER_IDS, self._answered(self._broker_ids),
                             watch=lambda: self._serial(self._watch_brokers))

    def _broker_ids(self, outcome: object) -> None:
        if not isinstance(outcome, list):
            return  # cut off from the store: the view stays as it is until the session is back
        ids = {int(name) for name in outcome}
        with self._lock:
            gone = [broker for broker in self._brokers if broker not in ids]
        if gone:
            self._change(lambda brokers: [brokers.pop(broker, None) for broker in gone])
        for broker in sorted(ids):
            self._store.get(broker_path(broker), self._answered(functools.partial(self._broker, broker)))

    def _broker(self, broker_id: int, outcome: object) -> None:
        if isinstance(outcome, Znode):
            info = BrokerInfo.decode(broker_id, outcome.data)
            with self._lock:
                known = self._brokers.get(broker_id) == info
            if not known:
                self._change(lambda brokers: brokers.__setitem__(broker_id, info))

    def _change(self, edit: Callable[[dict[int, BrokerInfo]], object]) -> None:
        with self._lock:
            before = frozenset(self._brokers)
            edit(self._brokers)
            after = frozenset(self._brokers)
            self._changed.notify_all()
        if before != after:
            log.info("live brokers %s -> %s", sorted(before), sorted(after))
            for listener in self._live_listeners:
                listener(before, after)

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        return lambda outcome: self._serial(lambda: handler(outcome))
