"""Carries out a fault schedule: each fault at its time, its healing after its duration.

A fault whose target is not up when it comes (a crash of a crashed node, a pause of a
paused one) is skipped, and so is its healing, so faults never undo each other. `disarm`
cancels what has not happened yet and heals what is active, for the run's final phase.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from txnsim.simulate.actors import ActorState
from txnsim.simulate.faults import LATE_MESSAGES, Fault
from txnsim.simulate.model import Model
from txnsim.simulate.network import ANY, LinkRule, Network
from txnsim.simulate.trace import Trace
from txnsim.simulate.world import Timer, World, derive_seed

_NET_RULES = {"net-delay": "delay", "drop": "drop", "dup": "dup", "reorder": "reorder", "late": "late"}


class Injector:
    def __init__(self, world: World, network: Network, model: Model, trace: Trace) -> None:
        self._world = world
        self._network = network
        self._model = model
        self._trace = trace
        self._timers: list[Timer] = []
        #: heal callbacks of the faults in effect, by the fault's position in the schedule
        self._active: dict[int, Callable[[], None]] = {}
        self.applied = 0
        self.skipped = 0

    def install(self, schedule: Iterable[Fault]) -> None:
        for index, fault in enumerate(schedule):
            self._timers.append(self._world.schedule(fault.at_ms, self._apply, index, fault))

    def disarm(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for index in sorted(self._active):
            self._active.pop(index)()

    # ------------------------------------------------------------ applying

    def _apply(self, index: int, fault: Fault) -> None:
        heal = self._start(fault)
        if heal is None:
            self.skipped += 1
            self._trace.record(self._world.now_ms, "fault", "world", fault.target, f"skipped {fault.describe()}")
            return
        self.applied += 1
        self._trace.record(self._world.now_ms, "fault", "world", fault.target, fault.describe())
        self._active[index] = heal
        if fault.duration_ms > 0:
            self._timers.append(self._world.after(fault.duration_ms, self._heal, index, fault))

    def _heal(self, index: int, fault: Fault) -> None:
        heal = self._active.pop(index, None)
        if heal is not None:
            self._trace.record(self._world.now_ms, "heal", "world", fault.target, fault.describe())
            heal()

    def _start(self, fault: Fault) -> Callable[[], None] | None:
        """Inject `fault` now; returns how to heal it, or None when it does not apply."""
        network, actors, model, target = self._network, self._network.actors, self._model, fault.target
        if fault.kind in _NET_RULES:
            ends = [(ANY, ANY)] if target == ANY else [(target, ANY), (ANY, target)]
            late = LATE_MESSAGES[fault.param("what")] if fault.kind == "late" else ""
            rules = [LinkRule(_NET_RULES[fault.kind], src, dst, fault.param("per_mille"), fault.param("extra_ms"), late)
                     for src, dst in ends]
            for rule in rules:
                network.add_rule(rule)

            def remove_rules() -> None:
                for rule in rules:
                    network.remove_rule(rule)
            return remove_rules
        if fault.kind == "partition":
            others = [a for a in actors.names() if a != target]
            links = [(target, other) for other in others]
            if not fault.param("oneway"):
                links += [(other, target) for other in others]
            for src, dst in links:
                network.cut(src, dst)

            def reconnect() -> None:
                for src, dst in links:
                    network.heal(src, dst)
            return reconnect
        if fault.kind == "power-loss":
            return self._power_loss()
        if not actors.is_up(target):
            return None
        if fault.kind == "crash":
            actors.crash(target)
            network.forget_calls_of(target)
            model.crash(target)

            def restart() -> None:
                actors.restart(target)
                model.restart(target)
            return restart
        if fault.kind == "pause":
            actors.pause(target)
            model.pause(target)

            def resume() -> None:
                if actors.state(target) is ActorState.PAUSED:  # not if a power loss took it meanwhile
                    actors.resume(target)
                    model.resume(target)
            return resume
        if fault.kind == "bitflip":
            model.flip_bit(target, random.Random(derive_seed(fault.param("flip_seed"), target)))
            return _nothing
        if fault.kind == "slow-fsync":
            model.slow_fsync(target, fault.param("extra_ms"))
            return lambda: model.slow_fsync(target, 0)
        if fault.kind == "clock-jump":
            actors.jump_clock(target, fault.param("jump_ms"))
            model.clock_jump(target, fault.param("jump_ms"))
            return _nothing
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _power_loss(self) -> Callable[[], None] | None:
        """Every node that is up or paused crashes at the same instant (a crashed one stays down until its own
        restart); they all restart when the power comes back."""
        network, actors, model = self._network, self._network.actors, self._model
        hit = [node for node in model.nodes() if actors.state(node) is not ActorState.CRASHED]
        if not hit:
            return None
        for node in hit:
            actors.crash(node)
            network.forget_calls_of(node)
            model.crash(node)

        def restore_power() -> None:
            for node in hit:
                if actors.state(node) is ActorState.CRASHED:
                    actors.restart(node)
                    model.restart(node)
        return restore_power


def _nothing() -> None:
    return None
