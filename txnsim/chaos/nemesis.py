"""The nemesis: a schedule of faults drawn up front from a seed, and a thread that carries it out.

`plan_faults` depends only on its arguments, so the same seed gives the same schedule.
The schedule never overlaps faults: the next one starts only after the previous node has
healed, so at most one node is down (killed or paused) at any time.
"""
from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from txnsim.chaos.history import History

log = logging.getLogger(__name__)

#: kill: SIGKILL, restart after the heal delay; pause: SIGSTOP, SIGCONT after it;
#: restart: SIGKILL and start again at once (a node that bounces); partition: the node cut off from the
#: other nodes and the ZooKeeper (its clients still reach it), mended after the delay; zookeeper: the node
#: cut off from the ZooKeeper alone; isr-loss: the node cut off from the other nodes (not the ZooKeeper) until
#: it has left every ISR, then the others SIGKILLed and the link mended, so it is the only replica alive and
#: in no ISR (a clean controller leaves its partitions offline until the others restart; an unclean one lets
#: it lead, and loses what only they had). The last three need nodes on hosts of their own
#: (LocalCluster(namespaces=True)).
FAULT_KINDS = ("kill", "pause", "restart", "partition", "zookeeper", "isr-loss")
NETWORK_FAULTS = ("partition", "zookeeper", "isr-loss")
#: how long isr-loss keeps its node cut off before the kills: past the chaos cluster's replica.lag.time.max.ms
#: (3 s), so its followers have left every ISR
ISR_LOSS_CUT_S = 4.0


class Breakable(Protocol):
    """What the nemesis needs of a cluster (LocalCluster has it)."""

    @property
    def node_ids(self) -> list[int]: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def partition(self, *groups: Sequence[int | str], one_way: bool = False) -> None: ...
    def heal(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Fault:
    #: seconds after the start of the run
    at_s: float
    kind: str
    node: int
    #: how long the node stays down (0 for restart)
    heal_after_s: float

    def __str__(self) -> str:
        down = f", healed after {self.heal_after_s:.2f} s" if self.heal_after_s else ""
        return f"t+{self.at_s:6.2f} s  {self.kind:<7} node {self.node}{down}"


def plan_faults(seed: int, duration_s: float, node_ids: Sequence[int], kinds: Sequence[str],
                interval_s: float, heal_s: tuple[float, float] = (1.0, 2.0),
                quiet_tail_s: float = 1.0, pause_s: tuple[float, float] | None = None) -> list[Fault]:
    """Faults every `interval_s` on average (uniformly 0.5x to 1.5x apart), each healed within
    the run; none starts within `quiet_tail_s` of the end. Pauses last `pause_s` (default: twice
    `heal_s`), so that some outlast the nodes' session timeout and are taken over and fenced,
    and others end before it and are simply waited out."""
    pause_s = pause_s or (heal_s[0], 2 * heal_s[1])
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(FAULT_KINDS)}")
    if not kinds or not node_ids or interval_s <= 0:
        return []
    rng = random.Random(seed)
    kinds, nodes = sorted(set(kinds)), sorted(node_ids)
    faults: list[Fault] = []
    t = interval_s * rng.uniform(0.5, 1.0)
    while True:
        kind = rng.choice(kinds)
        node = rng.choice(nodes)
        long_ones = kind == "pause" or kind in NETWORK_FAULTS  # some outlast a session, some do not
        heal = 0.0 if kind == "restart" else rng.uniform(*(pause_s if long_ones else heal_s))
        if kind == "isr-loss":  # the cut, then the others down past the 2 s session: a controller elects meanwhile
            heal = ISR_LOSS_CUT_S + rng.uniform(3.0, 5.0)
        if t + heal > duration_s - quiet_tail_s:
            return faults
        # to the millisecond, down: rounding up could end a fault inside the quiet tail
        faults.append(Fault(math.floor(t * 1000) / 1000, kind, node, math.floor(heal * 1000) / 1000))
        t += heal + interval_s * rng.uniform(0.5, 1.5)


class Nemesis(threading.Thread):
    """Carries out a schedule against a cluster, one fault at a time, recording each step.

    A step that runs late (a restart that takes long) delays the rest; faults never overlap.
    """

    def __init__(self, cluster: Breakable, schedule: Sequence[Fault], history: History, started_at: float) -> None:
        super().__init__(name="chaos-nemesis", daemon=True)
        self._cluster = cluster
        self._schedule = list(schedule)
        self._history = history
        self._started_at = started_at
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._down: dict[int, str] = {}

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        for fault in self._schedule:
            if not self._wait_until(fault.at_s):
                break
            self._inject(fault)
            if fault.heal_after_s:
                self._wait_until(fault.at_s + fault.heal_after_s)  # heals even when stopped meanwhile
            self._heal(fault.node)
        self.heal_all()

    def _wait_until(self, offset_s: float) -> bool:
        """False when stopped first; the schedule is timed, so this waits on the clock."""
        delay = self._started_at + offset_s - time.monotonic()
        return not self._stop_event.wait(max(delay, 0.0))

    def _inject(self, fault: Fault) -> None:
        try:
            if fault.kind == "pause":
                self._cluster.pause(fault.node)
            elif fault.kind == "partition":
                others: list[int | str] = [n for n in self._cluster.node_ids if n != fault.node]
                self._cluster.partition([fault.node], [*others, "zookeeper"])
            elif fault.kind == "zookeeper":
                self._cluster.partition([fault.node], ["zookeeper"])
            elif fault.kind == "isr-loss":
                survivors = [n for n in self._cluster.node_ids if n != fault.node]
                self._cluster.partition([fault.node], survivors)
                self._stop_event.wait(ISR_LOSS_CUT_S)  # a timed step of the fault: its replicas leave the ISRs
                for other in survivors:
                    self._cluster.kill(other)
                self._cluster.heal()
            else:
                self._cluster.kill(fault.node)
        except Exception as exc:  # recorded: a nemesis that dies would leave the run unbroken and unhealed
            log.warning("nemesis: %s of node %d failed: %s", fault.kind, fault.node, exc)
            self._history.fault(fault.kind, fault.node, "inject", exc)
            return
        with self._lock:
            self._down[fault.node] = fault.kind
        self._history.fault(fault.kind, fault.node, "inject")

    def _heal(self, node: int) -> None:
        with self._lock:
            kind = self._down.pop(node, None)
        if kind is None:
            return
        try:
            if kind == "pause":
                self._cluster.resume(node)
            elif kind == "isr-loss":
                for other in self._cluster.node_ids:
                    if other != node:
                        self._cluster.restart(other)
            elif kind in NETWORK_FAULTS:
                self._cluster.heal()
            else:
                self._cluster.restart(node)
        except Exception as exc:
            log.warning("nemesis: healing node %d after %s failed: %s", node, kind, exc)
            self._history.fault(kind, node, "heal", exc)
            with self._lock:
                self._down.setdefault(node, kind)  # heal_all() tries again
            return
        self._history.fault(kind, node, "heal")

    def heal_all(self) -> None:
        with self._lock:
            nodes = list(self._down)
        for node in nodes:
            self._heal(node)

    @property
    def nodes_down(self) -> dict[int, str]:
        with self._lock:
            return dict(self._down)
