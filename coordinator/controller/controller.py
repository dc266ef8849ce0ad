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
from coordinator.controller.znodes import (
    BROKER_IDS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    TOPICS,
    PartitionState,
    broker_path,
    decode_assignment,
    decode_controller,
    encode_controller,
    partition_state_path,
    topic_path,
)

log = logging.getLogger(__name__)

Serial = Callable[[Callable[[], None]], None]


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

    def _elect(self, live: frozenset[int]) -> None:
        for (topic, partition), (state, version) in sorted(self.view.states.items()):
            replicas = self.view.assignments[topic][partition]
            new = after_brokers_changed(replicas, state, live, self.epoch, unclean=self.unclean_leader_election)
            if new is not None:
                self._write_state(topic, partition, new, version)

    def _watch_topics(self) -> None:
        self._store.children(TOPICS, self._answered(self._topics), watch=lambda: self._serial(self._watch_topics))

    def _topics(self, outcome: object) -> None:
        if not self.active or not isinstance(outcome, list):
            return
        for topic in outcome:
            if topic not in self.view.assignments:
                self._store.get(topic_path(topic), self._answered(functools.partial(self._assignment, topic)))

    def _assignment(self, topic: str, outcome: object) -> None:
        if not self.active or not isinstance(outcome, Znode):
            return
        assignment = decode_assignment(outcome.data)
        self.view.assignments[topic] = assignment
        for partition in sorted(assignment):
            self._store.get(partition_state_path(topic, partition),
                            self._answered(functools.partial(self._loaded_state, topic, partition)))

    def _loaded_state(self, topic: str, partition: int, outcome: object) -> None:
        if not self.active:
            return
        replicas = self.view.assignments[topic][partition]
        if isinstance(outcome, NoNodeError):  # a new partition: its first state
            self._create_state(topic, partition, initial_state(replicas, self.view.live, self.epoch))
        elif isinstance(outcome, Znode):
            state = PartitionState.decode(outcome.data)
            self.view.states[(topic, partition)] = (state, outcome.version)
            new = after_brokers_changed(replicas, state, self.view.live, self.epoch,
                                        unclean=self.unclean_leader_election)
            if new is not None:
                self._write_state(topic, partition, new, outcome.version)

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
        def written(outcome: object) -> None:
            if isinstance(outcome, list):
                self.view.states[(topic, partition)] = (state, int(outcome[1]))
                log.info("controller %d: %s-%d leader %d epoch %d isr %s", self.broker_id, topic, partition,
                         state.leader, state.leader_epoch, list(state.isr))
            else:
                self._write_refused(topic, partition, outcome)
        self._store.commit([Check(CONTROLLER_EPOCH, self._epoch_version),
                            SetData(partition_state_path(topic, partition), state.encode(), version)],
                           self._answered(written))

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
                self._store.get(partition_state_path(topic, partition),
                                self._answered(lambda o: self._loaded_state(topic, partition, o)))
        self._store.get(CONTROLLER_EPOCH, self._answered(epoch_now))

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        """A store callback that runs `handler` on the serial executor."""
        return lambda outcome: self._serial(lambda: handler(outcome))
