"""Deleting a topic of a replicated cluster, as Kafka's ZooKeeper-era TopicDeletionManager did: DeleteTopics
writes the marker /admin/delete_topics/<topic>; every broker stops its replicas of the topic, deletes their
logs and says so under the marker (/admin/delete_topics/<topic>/<broker id>); once every broker holding a
replica has, the controller removes the topic's znodes, then the marker (controller.py).

A broker that is down meanwhile does its part when it is back (it reads the markers at every start), so the
deletion waits for it, as Kafka's waits while a replica is offline ("ineligible for deletion"); until then
the topic still exists, and creating it again is TOPIC_ALREADY_EXISTS. No partition state of a marked topic
is applied any more, so no replica of it comes back.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from coordinator.controller.controller import Serial
from coordinator.controller.store import CoordinationStore, NodeExistsError, SessionEvent, StoreError
from coordinator.controller.znodes import DELETE_TOPICS, deleted_by_path

log = logging.getLogger(__name__)


class ReplicaDeletions:
    """One broker's part: for every topic marked for deletion, `delete(topic)` (stop and delete this broker's
    replicas of it, run on the serial executor), then the broker's word under the marker."""

    def __init__(self, broker_id: int, store: CoordinationStore, serial: Serial, *,
                 delete: Callable[[str], None]) -> None:
        self.broker_id = broker_id
        self._store = store
        self._serial = serial
        self._delete = delete
        #: the topics marked for deletion as last read (their states are not applied here any more)
        self.marked: frozenset[str] = frozenset()
        #: topics whose replicas this broker deleted and said so, in this session
        self._said: set[str] = set()
        store.on_session(lambda event: serial(lambda: self._session(event)))

    def start(self) -> None:
        self._serial(lambda: self._store.ensure_path(DELETE_TOPICS, self._answered(lambda _o: self._watch())))

    def _session(self, event: SessionEvent) -> None:
        if event is SessionEvent.CONNECTED:  # a new session: its watches are new too
            self._said.clear()
            self._watch()

    def _watch(self) -> None:
        self._store.children(DELETE_TOPICS, self._answered(self._marked), watch=lambda: self._serial(self._watch))

    def _marked(self, outcome: object) -> None:
        if not isinstance(outcome, list):
            return
        self.marked = frozenset(outcome)
        for topic in sorted(self.marked - self._said):
            try:
                self._delete(topic)
            except OSError as error:  # said again at the next change, or the next start
                log.error("broker %d: cannot delete its replicas of topic %s (%s)", self.broker_id, topic, error)
                continue
            self._store.create(deleted_by_path(topic, self.broker_id), b"",
                               self._answered(functools.partial(self._said_so, topic)))

    def _said_so(self, topic: str, outcome: object) -> None:
        if isinstance(outcome, NodeExistsError) or not isinstance(outcome, StoreError):
            self._said.add(topic)
            log.info("broker %d: its replicas of topic %s are deleted", self.broker_id, topic)

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        return lambda outcome: self._serial(lambda: handler(outcome))
