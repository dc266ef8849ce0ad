"""What the engine simulates: the `Model` a cluster implements to run under `txnsim simulate`.

The engine owns time, the network, the fault schedule and the trace; a model owns its
actors (nodes and clients), their state and the invariants. The engine calls `check` after
every step and stops at the first violation; `finish` runs the final checks, with the
anomaly names of `txnsim chaos` (`txnsim.chaos.checker`) when the model records a chaos
history. A model's planted bugs are named in `BUGS`: each switches off one protection.
"""
from __future__ import annotations

import abc
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from txnsim.chaos.checker import MEANINGS as ANOMALY_MEANINGS
from txnsim.chaos.checker import CheckResult
from txnsim.simulate.network import Network
from txnsim.simulate.world import World


@dataclass(frozen=True, slots=True)
class Violation:
    """An invariant that did not hold, in words a reader can act on."""

    invariant: str
    message: str


@dataclass(slots=True)
class Report:
    """The final checks: violations (the first one fails the run) and totals for the summary."""

    violations: list[Violation] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    #: the Jepsen checker's result, when the model kept a chaos history
    anomalies: CheckResult | None = None

    @classmethod
    def of_check(cls, result: CheckResult, extra: Sequence[Violation] = ()) -> Report:
        """A report from `txnsim.chaos.checker.check`: every anomaly found is a violation of its name."""
        found = [Violation(f.name, f"{f.count} x {ANOMALY_MEANINGS[f.name]}; e.g. {f.example}")
                 for f in result.findings.values() if f.count]
        return cls([*extra, *found], dict(result.totals), result)


class Model(abc.ABC):
    """A simulated system. Subclasses set the class attributes and implement the abstract methods.

    Fault hooks run after the engine has changed the actor's state (a crashed node's
    messages and timers are already gone); override those the model cares about."""

    #: the name `--model` selects
    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: planted bugs: name -> what protection it switches off
    BUGS: ClassVar[Mapping[str, str]] = {}
    #: workloads: name -> description; the first is the default
    WORKLOADS: ClassVar[Mapping[str, str]] = {"default": "the model's only workload"}
    #: invariants checked after every step: name -> meaning (final anomalies are the chaos checker's)
    INVARIANTS: ClassVar[Mapping[str, str]] = {}
    #: pauses are planned longer than this, so that a paused owner loses its session
    session_timeout_ms: ClassVar[int] = 1_000

    def __init__(self, *, bug: str | None = None, workload: str | None = None) -> None:
        if bug is not None and bug not in self.BUGS:
            raise ValueError(f"model {self.name!r} has no bug {bug!r}; choose from {', '.join(self.BUGS) or 'none'}")
        if workload is not None and workload not in self.WORKLOADS:
            raise ValueError(f"model {self.name!r} has no workload {workload!r}; choose from "
                             f"{', '.join(self.WORKLOADS)}")
        self.bug = bug
        self.workload = workload or next(iter(self.WORKLOADS))

    @classmethod
    def bugs(cls) -> Mapping[str, str]:
        return cls.BUGS

    @classmethod
    def workloads(cls) -> Mapping[str, str]:
        return cls.WORKLOADS

    @abc.abstractmethod
    def nodes(self) -> Sequence[str]:
        """Servers that faults may crash, pause, slow down or whose clock may jump."""

    @abc.abstractmethod
    def clients(self) -> Sequence[str]:
        """Client actors: network faults may target them, process faults do not."""

    @abc.abstractmethod
    def setup(self, world: World, network: Network) -> None:
        """Register every actor with `network.register` and schedule the first work."""

    @abc.abstractmethod
    def check(self, world: World) -> list[Violation]:
        """The invariants, after every step: keep it cheap (check what the step changed)."""

    @abc.abstractmethod
    def finish(self, world: World) -> Report:
        """Final checks once the workload stopped and the system had time to settle."""

    @abc.abstractmethod
    def counters(self) -> dict[str, int]:
        """Totals for the summary: transactions committed and aborted, records, ..."""

    # ------------------------------------------------------------ fault hooks (default: nothing)

    def crash(self, node: str) -> None:
        """Lose the node's volatile state (and its unsynced writes)."""

    def restart(self, node: str) -> None:
        """Recover the node from what it had made durable."""

    def pause(self, node: str) -> None:
        """The node stopped; its messages and timers are held until `resume`."""

    def resume(self, node: str) -> None:
        """The node runs again; what was held is delivered next."""

    def clock_jump(self, node: str, delta_ms: int) -> None:
        """The node's local clock (`network.now(node)`) just moved by `delta_ms`."""

    def flip_bit(self, node: str, rng: random.Random) -> None:
        """Flip one bit of the node's stored data, chosen with `rng`."""

    def slow_fsync(self, node: str, extra_ms: int) -> None:
        """From now on the node's fsyncs take `extra_ms` more (0: back to normal)."""

    def quiesce(self) -> None:
        """Start no new work: the run is ending, every fault was healed, let things settle."""
