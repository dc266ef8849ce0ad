"""The controller's driver: every broker runs one, the first to create the ephemeral /controller znode is
the controller (until its session ends), and the controller keeps each partition's leader and ISR in
ZooKeeper as brokers come and go (Kafka's ZooKeeper-era KafkaController, its elections in elections.py).

Fencing: a newly elected controller bumps /controller_epoch with a versioned write, and writes every
partition state in a multi-op guarded by that znode's version, so a controller that lost its session but
does not know it yet cannot change anything. Every store answer is handed to `serial`, one at a time, so
the driver's state needs no lock (Kafka's controller event thread); the simulator hands them to its clock.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.controller.elections import after_brokers_changed, initial_state, preferred_leader
from coordinator.controller.store import (
    BadVersionError,
    Check,
    CoordinationStore,
    Create,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    SetData,
    StoreError,
    Znode,
)
from coordinator.controller.topic_admin import config_path
from coordinator.controller.znodes import (
    BROKER_IDS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    TOPICS,
    PartitionState,
    broker_path,
    decode_assignment,
    decode_controller,
    deleted_by_path,
    deletion_path,
    encode_controller,
    partition_state_path,
    topic_path,
)

log = logging.getLogger(__name__)

Serial = Callable[[Callable[[], None]], None]

#: a partition's new state and the version of the znode it replaces
Change = tuple[str, int, PartitionState, int]

#: the most partition states one multi-op writes (ZooKeeper refuses a request over jute.maxbuffer, 1 MB;
#: a state's path and data are some 150 bytes)
MAX_STATES_PER_COMMIT = 500


@dataclass
class ControllerView:
    """What the active controller knows: live brokers, assignments, and each partition's state with the
    znode version it was read or written at."""

    live: frozenset[int] = frozenset()
    #: the session each live broker's registration belongs to: a new one means the broker restarted
    #: (Kafka's broker epoch, the registration znode's czxid)
    sessions: dict[int, int] = field(default_factory=dict)
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    states: dict[tuple[str, int], tuple[PartitionState, int]] = field(default_factory=dict)
    #: the brokers the latest election could choose from: the live ones but those that just restarted
    electable: frozenset[int] = frozenset()
    #: topics marked for deletion: no election touches them
    deleting: set[str] = field(default_factory=set)
    #: partitions with a state write in flight, and those an election passed over meanwhile (decided again
    #: once the write is answered, from what it left)
    writing: set[tuple[str, int]] = field(default_factory=set)
    recheck: set[tuple[str, int]] = field(default_factory=set)


class Controller:
    def __init__(self, broker_id: int, store: CoordinationStore, serial: Serial, *, now_ms: Callable[[], int],
                 unclean_leader_election: bool = False) -> None:
        self.broker_id = broker_id
        self._store = store
        self._serial = serial
        self._now_ms = now_ms
        self.unclean_leader_election = unclean_leader_election
        #: this broker is the controller, at `epoch`
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        #: the controller as this broker last saw it (-1: none)
        self.controller_id = -1
        self.view = ControllerView()
        store.on_session(lambda event: serial(lambda: self._session(event)))

    def start(self) -> None:
        self._serial(self._try_to_lead)

    # ------------------------------------------------------------ election of the controller

    def _session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED and self.active:
            log.warning("controller %d: session expired; no longer the controller (epoch %d)", self.broker_id,
                        self.epoch)
            self._resign()
        elif event is SessionEvent.CONNECTED and not self.active:
            self._try_to_lead()
        elif event is SessionEvent.CONNECTED:  # back within the session: writes refused meanwhile are owed
            log.info("controller %d: reconnected; reading the cluster's state again", self.broker_id)
            self.view = ControllerView()
            self._watch_all()

    def _try_to_lead(self) -> None:
        self._store.create(CONTROLLER, encode_controller(self.broker_id, self._now_ms()),
                           self._answered(self._created_controller), ephemeral=True)

    def _created_controller(self, outcome: object) -> None:
        if isinstance(outcome, NodeExistsError):  # someone else leads: watch for its end
            self._store.get(CONTROLLER, self._answered(self._saw_controller),
                            watch=lambda: self._serial(self._try_to_lead))
        elif isinstance(outcome, StoreError):
            log.info("controller %d: cannot reach the store (%s); will try again once connected", self.broker_id,
                     outcome)
        else:
            self.controller_id = self.broker_id
            self._store.get(CONTROLLER_EPOCH, self._answered(self._read_epoch))

    def _saw_controller(self, outcome: object) -> None:
        if isinstance(outcome, Znode):
            self.controller_id = decode_controller(outcome.data)
        elif isinstance(outcome, NoNodeError):  # gone between our create and our read: try again
            self._try_to_lead()

    def _read_epoch(self, outcome: object) -> None:
        if isinstance(outcome, NoNodeError):
            self._store.create(CONTROLLER_EPOCH, b"1", self._answered(lambda o: self._bumped_epoch(o, 1)))
        elif isinstance(outcome, Znode):
            epoch = int(outcome.data) + 1
            self._store.set(CONTROLLER_EPOCH, str(epoch).encode(),
                            self._answered(lambda o: self._bumped_epoch(o, epoch)), version=outcome.version)
        else:
            self._resign()

    def _bumped_epoch(self, outcome: object, epoch: int) -> None:
        if isinstance(outcome, StoreError):  # another controller bumped it first, or the store went away
            log.info("controller %d: epoch %d not taken (%s)", self.broker_id, epoch, outcome)
            self._resign()
            return
        self.active, self.epoch = True, epoch
        self._epoch_version = outcome if isinstance(outcome, int) else 0  # the version set, or created (a path)
        log.info("controller %d: elected at controller epoch %d", self.broker_id, epoch)
        self.view = ControllerView()
        # ZooKeeper sets no child watch on a missing znode: make the top-level paths first (as Kafka's
        # KafkaZkClient.createTopLevelPaths does at start)
        self._store.ensure_path(BROKER_IDS, self._answered(lambda _o: self._store.ensure_path(
            TOPICS, self._answered(lambda _o: self._watch_all()))))

    def _watch_all(self) -> None:
        self._watch_brokers()
        self._watch_topics()
        self._store.ensure_path(DELETE_TOPICS, self._answered(lambda _o: self._watch_deletions()))

    def _resign(self) -> None:
        self.active = False
        self.view = ControllerView()

    # ------------------------------------------------------------ brokers and topics

    def _watch_brokers(self) -> None:
        self._store.children(BROKER_IDS, self._answered(self._brokers),
                             watch=lambda: self._serial(self._watch_brokers))

    def _brokers(self, outcome: object) -> None:
        """The registered brokers changed: read each registration's session, then elect."""
        if not self.active or not isinstance(outcome, list):
            return
        ids = sorted(int(name) for name in outcome)
        if not ids:
            self._registered({})
            return
        sessions: dict[int, int] = {}
        unread = set(ids)

        def read(broker_id: int, znode: object) -> None:
            if isinstance(znode, Znode):
                sessions[broker_id] = znode.ephemeral_owner
            unread.discard(broker_id)  # gone since it was listed: it is not live
            if not unread:
                self._registered(sessions)
        for broker_id in ids:
            self._store.get(broker_path(broker_id), self._answered(functools.partial(read, broker_id)))

    def _registered(self, sessions: dict[int, int]) -> None:
        """A broker registered under a new session restarted, whether or not its old registration was seen to
        go (a kill and restart within one watch's round trip shows as no change at all): it leaves every ISR
        and leadership first, as a dead broker does, and rejoins the ISRs once it has caught up again (Kafka's
        KafkaController handles its "bounced brokers" so). A restarted replica may have lost what it had
        (a damaged segment cut on open) and must not be elected on the strength of its old ISR membership."""
        if not self.active:
            return
        bounced = {b for b, session in sessions.items() if self.view.sessions.get(b, session) != session}
        self.view.sessions = dict(sessions)
        self.view.live = frozenset(sessions)
        if bounced:
            log.info("controller %d: broker(s) %s restarted; out of every ISR until caught up", self.broker_id,
                     sorted(bounced))
        self._elect(self.view.live - bounced)

    def _elect(self, electable: frozenset[int]) -> None:
        """Decide every partition afresh for the brokers `electable`. One whose state is being written is
        decided once that write is answered, from the state it leaves: decided now from the state the write
        replaces, it might need no change and go unanswered (a partition whose only in-sync replica
        registered again while it was being made leaderless stayed leaderless)."""
        self.view.electable = electable
        changes = []
        for (topic, partition), (state, version) in sorted(self.view.states.items()):
            if (topic, partition) in self.view.writing:
                self.view.recheck.add((topic, partition))
                continue
            change = self._change_for(topic, partition, state, version)
            if change is not None:
                changes.append(change)
        self._write_states(changes)

    def _change_for(self, topic: str, partition: int, state: PartitionState, version: int) -> Change | None:
        """The write the latest election's brokers call for on a partition in `state` (None: it needs none)."""
        new = after_brokers_changed(self.view.assignments[topic][partition], state, self.view.electable,
                                    self.epoch, unclean=self.unclean_leader_election)
        return None if new is None else (topic, partition, new, version)

    def _watch_topics(self) -> None:
        self._store.children(TOPICS, self._answered(self._topics), watch=lambda: self._serial(self._watch_topics))

    def _topics(self, outcome: object) -> None:
        if not self.active or not isinstance(outcome, list):
            return
        for topic in outcome:
            if topic not in self.view.assignments:
                self.view.assignments[topic] = {}
                self._watch_assignment(topic)

    def _watch_assignment(self, topic: str) -> None:
        """The topic's replica assignment, read again whenever it changes (partitions added; Kafka's
        controller keeps a PartitionModificationsHandler on each topic's znode)."""
        self._store.get(topic_path(topic), self._answered(functools.partial(self._assignment, topic)),
                        watch=self._again(lambda: self._watch_assignment(topic)))

    def _assignment(self, topic: str, outcome: object) -> None:
        if isinstance(outcome, NoNodeError):  # deleted
            self._forget(topic)
        if not self.active or not isinstance(outcome, Znode) or topic in self.view.deleting:
            return
        known = self.view.assignments.get(topic, {})
        assignment = decode_assignment(outcome.data)
        self.view.assignments[topic] = assignment
        # the new partitions' states (every one, for a controller reading the cluster) are read together and
        # their changes written in one multi-op (a new controller reads every topic so, mid-failover)
        unread, changes = {p for p in assignment if p not in known or (topic, p) not in self.view.states}, []
        if not unread:
            return

        def loaded(partition: int, read: object) -> None:
            change = self._loaded_state(topic, partition, read)
            if change is not None:
                changes.append(change)
            unread.discard(partition)
            if not unread and changes and self.active:
                self._write_states(sorted(changes, key=lambda change: change[1]))
        for partition in sorted(unread):
            self._store.get(partition_state_path(topic, partition),
                            self._answered(functools.partial(loaded, partition)))

    def _loaded_state(self, topic: str, partition: int, outcome: object) -> Change | None:
        """A partition's state as read: its first one created, or the change the live brokers call for
        returned, for the caller to write (with others)."""
        if not self.active:
            return None
        replicas = self.view.assignments[topic][partition]
        if isinstance(outcome, NoNodeError):  # a new partition: its first state
            self._create_state(topic, partition, initial_state(replicas, self.view.live, self.epoch))
            return None
        return self._elected(topic, partition, outcome)

    # ------------------------------------------------------------ deleting topics (topic_deletion.py)

    def _watch_deletions(self) -> None:
        self._store.children(DELETE_TOPICS, self._answered(self._deletions), watch=self._again(self._watch_deletions))

    def _deletions(self, outcome: object) -> None:
        if not self.active or not isinstance(outcome, list):
            return
        for topic in sorted(set(outcome) - self.view.deleting):
            log.info("controller %d: topic %s is marked for deletion", self.broker_id, topic)
            self.view.deleting.add(topic)
            self._drop_states(topic)
            self._watch_deleted_by(topic)

    def _watch_deleted_by(self, topic: str) -> None:
        self._store.children(deletion_path(topic), self._answered(functools.partial(self._deleted_by, topic)),
                             watch=self._again(lambda: self._watch_deleted_by(topic)
                                               if topic in self.view.deleting else None))

    def _deleted_by(self, topic: str, outcome: object) -> None:
        """The brokers that have deleted their replicas of `topic`: once every replica's broker is among them,
        the topic's znodes go (read afresh: the assignment is what says which brokers hold replicas)."""
        if not self.active or not isinstance(outcome, list):
            return
        done = {int(broker) for broker in outcome}

        def assignment(read: object) -> None:
            if isinstance(read, Znode):
                replicas = decode_assignment(read.data)
                waiting = sorted({b for rs in replicas.values() for b in rs} - done)
                if waiting:
                    log.info("controller %d: deleting topic %s waits for broker(s) %s", self.broker_id, topic,
                             waiting)
                    return
                paths = [partition_state_path(topic, p) for p in sorted(replicas)]
                paths += [path.rsplit("/", 1)[0] for path in paths] + [f"{topic_path(topic)}/partitions"]
            elif isinstance(read, NoNodeError):  # an earlier controller got this far
                paths = []
            else:
                return
            paths += [topic_path(topic), config_path(topic)]
            paths += [deleted_by_path(topic, broker) for broker in sorted(done)] + [deletion_path(topic)]
            self._delete_all(topic, paths)
        self._store.get(topic_path(topic), self._answered(assignment))

    def _delete_all(self, topic: str, paths: list[str]) -> None:
        """Delete `paths` one after another, each child before its parent; one already gone is fine (a
        controller before this one began). A store error stops it: the marker stays, and the next controller
        or the next broker's word starts over."""
        if not paths:
            log.info("controller %d: deleted topic %s", self.broker_id, topic)
            self._forget(topic)
            return

        def deleted(outcome: object) -> None:
            if isinstance(outcome, StoreError) and not isinstance(outcome, NoNodeError):
                log.info("controller %d: deleting topic %s stopped at %s (%s)", self.broker_id, topic, paths[0],
                         outcome)
            elif self.active:
                self._delete_all(topic, paths[1:])
        self._store.delete(paths[0], self._answered(deleted))

    def _forget(self, topic: str) -> None:
        self.view.assignments.pop(topic, None)
        self.view.deleting.discard(topic)
        self._drop_states(topic)

    def _drop_states(self, topic: str) -> None:
        for key in [key for key in self.view.states if key[0] == topic]:
            del self.view.states[key]

    # ------------------------------------------------------------ preferred leaders

    def rebalance_leaders(self) -> None:
        """Kafka's auto leader rebalance: each partition's state is read afresh (leaders change their ISRs
        themselves) and handed to its preferred replica where that one is live and in sync. Kafka waits for
        a broker's imbalance to pass leader.imbalance.per.broker.percentage (10%); txnsim moves every one."""
        if not self.active:
            return
        for topic, partition in sorted(self.view.states):
            self._store.get(partition_state_path(topic, partition),
                            self._answered(functools.partial(self._rebalance, topic, partition)))

    def _rebalance(self, topic: str, partition: int, outcome: object) -> None:
        if not self.active or not isinstance(outcome, Znode):
            return
        state = PartitionState.decode(outcome.data)
        self.view.states[(topic, partition)] = (state, outcome.version)
        new = preferred_leader(self.view.assignments[topic][partition], state, self.view.live, self.epoch)
        if new is not None:
            log.info("controller %d: %s-%d back to its preferred leader %d", self.broker_id, topic, partition,
                     new.leader)
            self._write_state(topic, partition, new, outcome.version)

    # ------------------------------------------------------------ writes, fenced by the controller epoch

    def _create_state(self, topic: str, partition: int, state: PartitionState) -> None:
        path = partition_state_path(topic, partition)
        parent = path.rsplit("/", 1)[0]

        def created(outcome: object) -> None:
            if isinstance(outcome, list):
                self.view.states[(topic, partition)] = (state, 0)
            else:
                self._write_refused(topic, partition, outcome)
        self._store.ensure_path(parent, self._answered(lambda _o: self._store.commit(
            [Check(CONTROLLER_EPOCH, self._epoch_version), Create(path, state.encode())],
            self._answered(created))))

    def _write_state(self, topic: str, partition: int, state: PartitionState, version: int) -> None:
        view = self.view
        view.writing.add((topic, partition))

        def written(outcome: object) -> None:
            view.writing.discard((topic, partition))
            if isinstance(outcome, list):
                self.view.states[(topic, partition)] = (state, int(outcome[1]))
                log.info("controller %d: %s-%d leader %d epoch %d isr %s", self.broker_id, topic, partition,
                         state.leader, state.leader_epoch, list(state.isr))
                self._decide_again([(topic, partition)])
            elif isinstance(outcome, BadVersionError):
                view.recheck.discard((topic, partition))  # read again and decided afresh
                self._write_refused(topic, partition, outcome)
            else:
                self._decide_again([(topic, partition)])
        self._store.commit([Check(CONTROLLER_EPOCH, self._epoch_version),
                            SetData(partition_state_path(topic, partition), state.encode(), version)],
                           self._answered(written))

    def _write_states(self, changes: list[Change], *, tries: int = 2) -> None:
        """Every partition an election moves, in multi-ops of up to MAX_STATES_PER_COMMIT: one round trip and
        one ZooKeeper commit instead of one per partition, which kept the last partitions of a failover
        waiting hundreds of milliseconds. A multi-op is all or nothing, and refused if any state changed
        since this controller read or wrote it (leaders write their ISR changes themselves, so after a
        broker rejoins nearly every version this controller holds is old): then those states are read
        again, together, and the changes they still call for written again, as Kafka's controller retries
        an election; after `tries`, each partition is written on its own."""
        if len(changes) > MAX_STATES_PER_COMMIT:
            for start in range(0, len(changes), MAX_STATES_PER_COMMIT):
                self._write_states(changes[start:start + MAX_STATES_PER_COMMIT], tries=tries)
            return
        if len(changes) <= 1 or tries == 0:
            for change in changes:
                self._write_state(*change)
            return
        view, keys = self.view, [(topic, partition) for topic, partition, _s, _v in changes]
        view.writing.update(keys)

        def written(outcome: object) -> None:
            view.writing.difference_update(keys)
            if isinstance(outcome, list):
                for (topic, partition, state, _version), new_version in zip(changes, outcome[1:]):
                    self.view.states[(topic, partition)] = (state, int(new_version))
                # one line, not one per partition: the serial executor this shares with the broker's own
                # state watch is held up by every log call while the node's other threads contend
                log.info("controller %d: %d partition states (leader/epoch/isr): %s", self.broker_id, len(changes),
                         ", ".join(f"{topic}-{partition} {state.leader}/{state.leader_epoch}/"
                                   f"{','.join(map(str, state.isr))}" for topic, partition, state, _v in changes))
                self._decide_again(keys)
            elif isinstance(outcome, BadVersionError) and self.active:
                view.recheck.difference_update(keys)  # read again and decided afresh
                self._reread_states(keys, tries - 1)
            else:
                self._decide_again(keys)
        self._store.commit([Check(CONTROLLER_EPOCH, self._epoch_version)]
                           + [SetData(partition_state_path(topic, partition), state.encode(), version)
                              for topic, partition, state, version in changes],
                           self._answered(written))

    def _decide_again(self, keys: list[tuple[str, int]]) -> None:
        """The partitions of `keys` an election passed over while they were being written, decided now."""
        changes = []
        for topic, partition in keys:
            if (topic, partition) not in self.view.recheck:
                continue
            self.view.recheck.discard((topic, partition))
            entry = self.view.states.get((topic, partition))
            if entry is None or not self.active:
                continue
            change = self._change_for(topic, partition, *entry)
            if change is not None:
                changes.append(change)
        self._write_states(changes)

    def _reread_states(self, partitions: list[tuple[str, int]], tries: int) -> None:
        unread, changes = set(partitions), []

        def read(topic: str, partition: int, outcome: object) -> None:
            change = self._elected(topic, partition, outcome)
            if change is not None:
                changes.append(change)
            unread.discard((topic, partition))
            if not unread and changes and self.active:
                self._write_states(changes, tries=tries)
        for topic, partition in partitions:
            self._store.get(partition_state_path(topic, partition),
                            self._answered(functools.partial(read, topic, partition)))

    def _elected(self, topic: str, partition: int, outcome: object) -> Change | None:
        """The change a state as read calls for with the brokers the latest election may choose from (None:
        it needs none)."""
        if not self.active or not isinstance(outcome, Znode):
            return None
        state = PartitionState.decode(outcome.data)
        self.view.states[(topic, partition)] = (state, outcome.version)
        return self._change_for(topic, partition, state, outcome.version)

    def _write_refused(self, topic: str, partition: int, outcome: object) -> None:
        """A fenced write: either a newer controller exists (resign) or the state changed under us (a leader
        wrote its ISR): read both again and decide afresh."""
        if not isinstance(outcome, BadVersionError):
            return

        def epoch_now(read: object) -> None:
            if isinstance(read, Znode) and read.version != self._epoch_version:
                log.warning("controller %d: a newer controller took over (epoch %s)", self.broker_id,
                            read.data.decode())
                self._resign()
            elif self.active:
                self._store.get(partition_state_path(topic, partition), self._answered(reread))

        def reread(outcome: object) -> None:
            change = self._loaded_state(topic, partition, outcome)
            if change is not None:
                self._write_state(*change)
        self._store.get(CONTROLLER_EPOCH, self._answered(epoch_now))

    def _again(self, watch: Callable[[], None]) -> Callable[[], None]:
        """A watch callback that runs `watch` again on the serial executor, unless the view it was set for has
        since been replaced (resigned, reconnected: the new view sets watches of its own)."""
        view = self.view
        return lambda: self._serial(lambda: watch() if self.active and self.view is view else None)

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        """A store callback that runs `handler` on the serial executor."""
        return lambda outcome: self._serial(lambda: handler(outcome))
