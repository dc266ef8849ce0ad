"""Which nodes are alive, and so who owns what right now.

Two signals, for the two ways a node stops serving:
- Death: a live node holds an exclusive flock on DATA/nodes/<id>.lock; the kernel releases it
  the moment the process dies (SIGKILL included), so a dead node is noticed within one probe
  interval (milliseconds), not after a lease runs out.
- A stall (SIGSTOP, a long pause, a wedged process): the node bumps a counter in
  DATA/nodes/<id>.heartbeat every heartbeat interval; a peer that sees the counter stand still
  for the session timeout counts the node out, though its lock is still held. Each observer
  times the counter with its own monotonic clock, so no clocks need to agree.
Counting a stalled node out is safe because its logs are then taken over with a new leader
epoch that fences it (partitions/leader_epochs.py): it can no longer acknowledge anything.
"""
from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from typing import Protocol

from coordinator.layout import ClusterLayout
from coordinator.placement import Placement

log = logging.getLogger(__name__)


class PreferredOwners(Protocol):
    def owner(self, topic: str, partition: int) -> int: ...


class ClusterOwnership(Protocol):
    """Who owns each log and who lives, as one node sees it: Membership here, the coordination store's word on
    a replicated cluster (coordinator/zk_cluster.py StoreOwnership)."""

    @property
    def live(self) -> frozenset[int]: ...
    @property
    def placement(self) -> PreferredOwners: ...

    def owner(self, topic: str, partition: int) -> int: ...
    def may_cut_off(self, node_id: int) -> bool: ...
    def on_change(self, listener: Callable[[frozenset[int], frozenset[int]], None]) -> None: ...


def node_is_alive(layout: ClusterLayout, node_id: int) -> bool:
    """True while some process holds node_id's lock (probing takes it for an instant if it is free)."""
    try:
        fd = os.open(layout.node_lock(node_id), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


_BEAT = struct.Struct(">q")


class Heartbeat:
    """Bumps this node's counter in DATA/nodes/<id>.heartbeat from a thread of its own (a long
    reconcile must not look like a stall). No fsync: it is liveness, not state."""

    def __init__(self, layout: ClusterLayout, node_id: int, interval_s: float) -> None:
        self._fd = os.open(layout.node_heartbeat(node_id), os.O_RDWR | os.O_CREAT, 0o644)
        self._interval = interval_s
        self._count = 0
        self._stopped = threading.Event()
        self.beat()

    def beat(self) -> None:
        self._count += 1
        os.pwrite(self._fd, _BEAT.pack(self._count), 0)

    def run(self) -> None:
        try:
            while not self._stopped.wait(self._interval):
                try:
                    self.beat()
                except OSError:
                    log.exception("heartbeat write failed")
        finally:
            os.close(self._fd)

    def stop(self) -> None:
        self._stopped.set()


def read_heartbeat(layout: ClusterLayout, node_id: int) -> int | None:
    """The node's heartbeat counter, None if it has none yet."""
    try:
        with open(layout.node_heartbeat(node_id), "rb") as f:
            data = f.read(_BEAT.size)
    except FileNotFoundError:
        return None
    return _BEAT.unpack(data)[0] if len(data) == _BEAT.size else None


class Membership:
    """The live set, refreshed by a probe thread; `owner()` answers with the current view."""

    def __init__(self, layout: ClusterLayout, node_ids: list[int], own_node_id: int | None,
                 probe_interval_s: float = 0.05, start_up_grace_s: float = 0.5,
                 session_timeout_s: float = 2.0) -> None:
        self.layout = layout
        self._session_timeout = session_timeout_s
        #: node -> (last heartbeat counter seen, monotonic time it was first seen)
        self._beats: dict[int, tuple[int | None, float]] = {}
        self._last_probe = time.monotonic()
        # Nodes of a cluster start together: for a moment after start-up every node counts as
        # alive, so the first node up does not take every shard only to hand them back.
        self._assume_all_alive_until = time.monotonic() + start_up_grace_s
        self.placement = Placement(tuple(node_ids))
        self.own_node_id = own_node_id
        self._interval = probe_interval_s
        self._lock = threading.Lock()
        self._live = frozenset(self._probe())
        self._listeners: list[Callable[[frozenset[int], frozenset[int]], None]] = []
        self._stopped = threading.Event()

    @property
    def live(self) -> frozenset[int]:
        with self._lock:
            return self._live

    def owner(self, topic: str, partition: int) -> int:
        return self.placement.owner(topic, partition, self.live)

    def owned_by(self, node_id: int, topic: str, partitions: int) -> list[int]:
        return self.placement.owned_by(node_id, topic, partitions, self.live)

    def may_cut_off(self, node_id: int) -> bool:
        """Whether a log led by `node_id` may be taken over without waiting for it to let go."""
        return node_id != self.own_node_id and node_id not in self.live

    def on_change(self, listener: Callable[[frozenset[int], frozenset[int]], None]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> bool:
        """Probe now; tell the listeners (old, new) if the live set changed."""
        live = frozenset(self._probe())
        with self._lock:
            old, self._live = self._live, live
        if live == old:
            return False
        log.info("live nodes changed: %s -> %s", sorted(old), sorted(live))
        for listener in self._listeners:
            listener(old, live)
        return True

    def run(self, tick: Callable[[], None] | None = None) -> None:
        """Probe until stopped; `tick` runs after every probe (to retry what could not be done yet)."""
        while not self._stopped.wait(self._interval):
            try:
                self.refresh()
                if tick is not None:
                    tick()
            except Exception:
                log.exception("membership probe failed")

    def stop(self) -> None:
        self._stopped.set()

    def _probe(self) -> list[int]:
        if time.monotonic() < self._assume_all_alive_until:
            return list(self.placement.node_ids)
        now = time.monotonic()
        if now - self._last_probe > max(0.5, 4 * self._interval):
            # we were stalled ourselves: others' counters stood still only in our eyes, time them afresh
            self._beats.clear()
        self._last_probe = now
        return [n for n in self.placement.node_ids
                if n == self.own_node_id or (node_is_alive(self.layout, n) and self._beating(n))]

    def _beating(self, node_id: int) -> bool:
        """False once the node's heartbeat counter has stood still for the session timeout."""
        now = time.monotonic()
        count = read_heartbeat(self.layout, node_id)
        seen, since = self._beats.get(node_id, (None, now))
        if count != seen or node_id not in self._beats:
            self._beats[node_id] = (count, now)
            return True
        if now - since >= self._session_timeout:
            if now - since < self._session_timeout + self._interval:
                log.warning("node %d: heartbeat stalled for %.1f s; counting it out", node_id, now - since)
            return False
        return True
