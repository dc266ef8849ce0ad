"""Which nodes are alive, as the kernel sees it, and so who owns what right now.

A live node holds an exclusive flock on DATA/nodes/<id>.lock; the kernel releases it the
moment the process dies (SIGKILL included), so a dead node is noticed within one probe
interval (milliseconds), not after a lease runs out. A paused (SIGSTOPped) node keeps its
locks: it stays the owner, and its logs wait for it rather than risk two writers.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable

from coordinator.layout import ClusterLayout
from coordinator.placement import Placement

log = logging.getLogger(__name__)


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


class Membership:
    """The live set, refreshed by a probe thread; `owner()` answers with the current view."""

    def __init__(self, layout: ClusterLayout, node_ids: list[int], own_node_id: int | None,
                 probe_interval_s: float = 0.05, start_up_grace_s: float = 0.5) -> None:
        self.layout = layout
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
        return [n for n in self.placement.node_ids
                if n == self.own_node_id or node_is_alive(self.layout, n)]
