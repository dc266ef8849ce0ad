"""Who is running: every named actor (node or client) is up, paused or crashed.

An actor's work (a delivered message, a timer) only runs while it is up. A paused actor is
a SIGSTOPped process: what arrives is held, in arrival order, and runs when it resumes. A
crashed actor loses what arrives and every timer it had armed: a restart is a new
incarnation, and work of an older incarnation never runs. Each actor reads its own clock,
which a clock-jump fault can move; the world's clock never jumps.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from txnsim.simulate.trace import Trace
from txnsim.simulate.world import Timer, World


class ActorState(enum.Enum):
    UP = "up"
    PAUSED = "paused"
    CRASHED = "crashed"


@dataclass(slots=True)
class _Actor:
    name: str
    state: ActorState = ActorState.UP
    incarnation: int = 0
    clock_offset_ms: int = 0
    held: list[tuple[Callable[..., None], tuple[Any, ...]]] = field(default_factory=list)


class Actors:
    """The lifecycle of every actor; the network and the injector go through it."""

    def __init__(self, world: World, trace: Trace) -> None:
        self._world = world
        self._trace = trace
        self._actors: dict[str, _Actor] = {}

    def add(self, name: str) -> None:
        if name in self._actors:
            raise ValueError(f"actor {name!r} is already registered")
        self._actors[name] = _Actor(name)

    def names(self) -> list[str]:
        return list(self._actors)

    def state(self, name: str) -> ActorState:
        return self._actors[name].state

    def incarnation(self, name: str) -> int:
        return self._actors[name].incarnation

    def is_up(self, name: str) -> bool:
        return self._actors[name].state is ActorState.UP

    def now(self, name: str) -> int:
        """The actor's local clock in milliseconds: the world's, plus any jump it suffered."""
        return self._world.now_ms + self._actors[name].clock_offset_ms

    # ------------------------------------------------------------ running work as an actor

    def run_as(self, name: str, work: Callable[..., None], *args: Any) -> bool:
        """Run `work(*args)` as `name` now; held if paused, lost if crashed (returns False)."""
        actor = self._actors[name]
        if actor.state is ActorState.UP:
            work(*args)
            return True
        if actor.state is ActorState.PAUSED:
            actor.held.append((work, args))
            return True
        return False

    def set_timer(self, name: str, delay_ms: int, work: Callable[..., None], *args: Any,
                  label: str | None = None) -> Timer:
        """Arm a timer of `name`: it fires after `delay_ms` unless cancelled or the actor crashed first."""
        actor = self._actors[name]
        return self._world.after(delay_ms, self._fire, actor, actor.incarnation, label or work.__name__, work, args)

    def _fire(self, actor: _Actor, incarnation: int, label: str, work: Callable[..., None],
              args: tuple[Any, ...]) -> None:
        if actor.incarnation != incarnation:
            return
        self._trace.record(self._world.now_ms, "timer", actor.name, actor.name, label)
        self.run_as(actor.name, work, *args)

    # ------------------------------------------------------------ lifecycle (the injector calls these)

    def crash(self, name: str) -> None:
        actor = self._actors[name]
        actor.state = ActorState.CRASHED
        actor.incarnation += 1
        actor.held.clear()

    def restart(self, name: str) -> None:
        actor = self._actors[name]
        if actor.state is ActorState.CRASHED:
            actor.state = ActorState.UP

    def pause(self, name: str) -> None:
        actor = self._actors[name]
        if actor.state is ActorState.UP:
            actor.state = ActorState.PAUSED

    def resume(self, name: str) -> None:
        """Back up: what was held runs now, one event each, in the order it arrived."""
        actor = self._actors[name]
        if actor.state is not ActorState.PAUSED:
            return
        actor.state = ActorState.UP
        held, actor.held = actor.held, []
        for work, args in held:
            self._world.schedule(self._world.now_ms, self.run_as, name, work, *args)

    def jump_clock(self, name: str, delta_ms: int) -> None:
        self._actors[name].clock_offset_ms += delta_ms
