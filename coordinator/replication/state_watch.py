"""A broker's view of the partitions it holds a replica of, read from the coordination store and watched: each
topic's replica assignment and each of its partitions' state znode (leader, leader epoch, ISR, and the
znode's version), handed to the broker's ReplicaManager on every change.

Kafka's brokers in ZooKeeper mode heard the same facts from the controller as LeaderAndIsr requests; txnsim's
read the znodes the controller writes, so there is one source of truth and one path for it, and a leader's
own ISR writes come back the same way. A broker cut off from the store keeps what it knows (Kafka's leaders
kept serving until their session expired); when its session expires it gives up every leadership at once,
since the controller will by then have moved them, and reads everything again once it has a new session.
Every store answer is handed to `serial`, one at a time, as the controller's are.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from coordinator.controller.controller import Serial
from coordinator.controller.store import CoordinationStore, NoNodeError, SessionEvent, Znode
from coordinator.controller.znodes import TOPICS, PartitionState, decode_assignment, partition_state_path, topic_path
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: the word for one partition: its replicas, its state and the state znode's version
OnState = Callable[[TopicPartition, tuple[int, ...], PartitionState, int], None]


class PartitionStateWatch:
    def __init__(self, broker_id: int, store: CoordinationStore, serial: Serial, *, on_state: OnState,
                 on_session_expired: Callable[[], None], every_partition: bool = False,
                 on_topic: Callable[[str], None] | None = None,
                 on_topic_gone: Callable[[str], None] | None = None) -> None:
        """`every_partition`: watch the state of every partition, not only those this broker holds a replica of
        (a node answers Metadata for all of them); `on_topic(name)` hears of each topic the first time its
        assignment is read, `on_topic_gone(name)` of each whose assignment is deleted."""
        self.broker_id = broker_id
        self._every_partition = every_partition
        self._on_topic = on_topic
        self._on_topic_gone = on_topic_gone
        #: in this generation: topics whose assignment znode is watched (the watch outlives a deletion: it fires
        #: at a re-creation), topics whose assignment was read, partitions whose state is watched
        self._watching: set[str] = set()
        self._read: set[str] = set()
        self._state_watched: set[TopicPartition] = set()
        self._store = store
        self._serial = serial
        self._on_state = on_state
        self._on_session_expired = on_session_expired
        #: the assignment of each topic read so far, and the newest (leader epoch, version) of each state
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self._seen: dict[TopicPartition, tuple[int, int]] = {}
        #: a new read of everything is owed (a new session): watches set before may be gone
        self._generation = 0
        store.on_session(lambda event: serial(lambda: self._session(event)))

    def start(self) -> None:
        self._serial(lambda: self._store.ensure_path(TOPICS, self._answered(lambda _o: self._watch_topics())))

    def _session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            log.warning("broker %d: session expired; giving up every leadership until the store is back",
                        self.broker_id)
            self._on_session_expired()
        elif event is SessionEvent.CONNECTED:
            # everything is read and watched again, but what this broker knows stays until then: a topic that
            # vanished from the assignments for the length of a round trip was one whose markers its leader
            # took for those of a deleted topic, answered done and never wrote (an aborted transaction's
            # records were then committed by the next transaction's marker)
            self._generation += 1
            self._watching.clear()
            self._read.clear()
            self._state_watched.clear()
            self._seen.clear()  # every state is handed on again: an unchanged one may name this node leader
            self._watch_topics()

    # ------------------------------------------------------------ reads and watches

    def _watch_topics(self) -> None:
        generation = self._generation
        self._store.children(TOPICS, self._answered(lambda outcome: self._topics(outcome, generation)),
                             watch=self._fired(self._watch_topics, generation))

    def _topics(self, outcome: object, generation: int) -> None:
        if generation != self._generation or not isinstance(outcome, list):
            return
        for topic in sorted(set(self.assignments) - set(outcome)):  # deleted while this broker was away
            self._gone(topic)
        for topic in outcome:
            if topic not in self.assignments:
                self.assignments[topic] = {}
            if topic not in self._watching:
                self._watching.add(topic)
                self._watch_assignment(topic)

    def _watch_assignment(self, topic: str) -> None:
        generation = self._generation
        self._store.get(topic_path(topic), self._answered(functools.partial(self._assignment, topic, generation)),
                        watch=self._fired(functools.partial(self._watch_assignment, topic), generation))

    def _assignment(self, topic: str, generation: int, outcome: object) -> None:
        if generation == self._generation and isinstance(outcome, NoNodeError):  # the topic was deleted
            self._gone(topic)
            return
        if generation != self._generation or not isinstance(outcome, Znode):
            return
        first = topic not in self._read
        self._read.add(topic)
        self.assignments[topic] = decode_assignment(outcome.data)
        if first and self._on_topic is not None:
            self._on_topic(topic)
        for partition, replicas in sorted(self.assignments[topic].items()):
            tp = TopicPartition(topic, partition)
            if (self._every_partition or self.broker_id in replicas) and tp not in self._state_watched:
                self._state_watched.add(tp)
                self._watch_state(tp)

    def _gone(self, topic: str) -> None:
        self._read.discard(topic)
        if self.assignments.pop(topic, None) is None:
            return
        for tp in [tp for tp in self._seen if tp.topic == topic]:
            del self._seen[tp]
        self._state_watched = {tp for tp in self._state_watched if tp.topic != topic}
        if self._on_topic_gone is not None:
            self._on_topic_gone(topic)

    def _watch_state(self, tp: TopicPartition) -> None:
        generation = self._generation
        self._store.get(partition_state_path(tp.topic, tp.partition),
                        self._answered(functools.partial(self._state, tp, generation)),
                        watch=self._fired(functools.partial(self._watch_state, tp), generation))

    def _state(self, tp: TopicPartition, generation: int, outcome: object) -> None:
        if generation != self._generation or isinstance(outcome, NoNodeError) or not isinstance(outcome, Znode):
            return  # not written yet: the watch fires when the controller creates it
        state = PartitionState.decode(outcome.data)
        replicas = self.assignments.get(tp.topic, {}).get(tp.partition)
        if replicas is None or self._seen.get(tp, (-1, -1)) >= (state.leader_epoch, outcome.version):
            return
        self._seen[tp] = (state.leader_epoch, outcome.version)
        self._on_state(tp, replicas, state, outcome.version)

    # ------------------------------------------------------------ helpers

    def _fired(self, again: Callable[[], None], generation: int) -> Callable[[], None]:
        """A watch that reads again, unless a new session has already read everything afresh."""
        return lambda: self._serial(lambda: again() if generation == self._generation else None)

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        return lambda outcome: self._serial(lambda: handler(outcome))
