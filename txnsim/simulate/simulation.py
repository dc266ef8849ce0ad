"""One simulated run, start to verdict: a pure function of its `SimConfig`.

The run has two phases. The main phase runs the workload under the fault schedule until
the step or time limit; the final phase heals every fault, stops new work and lets the
system settle for `settle_ms`, then the model's final checks run. The model's invariants
are checked after every step of both phases; the first violation ends the run.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from txnsim.simulate.actors import Actors
from txnsim.simulate.faults import (
    FAULT_KINDS,
    Fault,
    plan_faults,
    schedule_from_json,
    schedule_to_json,
)
from txnsim.simulate.injector import Injector
from txnsim.simulate.model import Model, Report, Violation
from txnsim.simulate.network import Network
from txnsim.simulate.registry import DEFAULT_MODEL, MODELS
from txnsim.simulate.trace import Trace
from txnsim.simulate.world import Livelock, World

#: the schedule's horizon when the run is limited by steps only
DEFAULT_HORIZON_MS = 60_000
DEFAULT_SETTLE_MS = 5_000


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything a run depends on: the same config gives the same trace, byte for byte."""

    seed: int
    model: str = DEFAULT_MODEL
    workload: str | None = None
    bug: str | None = None
    #: kinds the schedule is planned from (ignored when `schedule` is given)
    faults: tuple[str, ...] = FAULT_KINDS
    #: an explicit schedule (a replayed or shrunk one) instead of planning from the seed
    schedule: tuple[Fault, ...] | None = None
    max_steps: int | None = None
    until_ms: int | None = 10_000
    settle_ms: int = DEFAULT_SETTLE_MS
    keep_trace: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "model": self.model, "workload": self.workload, "bug": self.bug,
                "faults": list(self.faults),
                "schedule": None if self.schedule is None else schedule_to_json(self.schedule),
                "max_steps": self.max_steps, "until_ms": self.until_ms, "settle_ms": self.settle_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SimConfig:
        schedule = data.get("schedule")
        return cls(seed=int(data["seed"]), model=str(data.get("model", DEFAULT_MODEL)),
                   workload=data.get("workload"), bug=data.get("bug"), faults=tuple(data.get("faults", ())),
                   schedule=None if schedule is None else tuple(schedule_from_json(schedule)),
                   max_steps=data.get("max_steps"), until_ms=data.get("until_ms"),
                   settle_ms=int(data.get("settle_ms", DEFAULT_SETTLE_MS)))


@dataclass(frozen=True, slots=True)
class Failure:
    """The first violation: where the run stopped, in steps and simulated milliseconds."""

    invariant: str
    message: str
    step: int
    at_ms: int
    #: found by the final checks rather than after a step
    final: bool = False


@dataclass(slots=True)
class SimResult:
    config: SimConfig
    schedule: tuple[Fault, ...]
    steps: int
    now_ms: int
    trace_hash: str
    trace_lines: list[str]
    failure: Failure | None
    checks: int
    invariants: dict[str, str]
    counters: dict[str, int]
    faults_applied: int
    report: Report | None = None
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def replay_config(self) -> SimConfig:
        """The config that runs exactly this run again, with its schedule written out."""
        return replace(self.config, schedule=self.schedule)


#: the invariant a run violates when the simulated system raises instead of answering
UNHANDLED = "unhandled-exception"
#: the invariant a run violates when simulated time stops moving (World.run's Livelock)
LIVELOCK = "livelock"


def _where(exc: BaseException) -> str:
    """The innermost frame of the project's own code that raised (file:line function)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "site-packages" not in f.filename] or frames
    last = ours[-1]
    return f"{last.filename.rsplit('/', 2)[-2]}/{last.filename.rsplit('/', 1)[-1]}:{last.lineno} {last.name}"


def make_model(config: SimConfig) -> Model:
    factory = MODELS.get(config.model)
    if factory is None:
        raise ValueError(f"no model {config.model!r}; choose from {', '.join(MODELS)}")
    return factory(bug=config.bug, workload=config.workload)


def simulate(config: SimConfig) -> SimResult:
    world = World(config.seed)
    trace = Trace(keep=config.keep_trace)
    network = Network(world, Actors(world, trace), trace)
    model = make_model(config)
    model.setup(world, network)
    if config.schedule is not None:
        schedule = tuple(config.schedule)
    else:
        horizon = config.until_ms if config.until_ms is not None else DEFAULT_HORIZON_MS
        schedule = tuple(plan_faults(config.seed, config.faults, model.nodes(), network.actors.names(), horizon,
                                     session_timeout_ms=model.session_timeout_ms))
    injector = Injector(world, network, model, trace)
    injector.install(schedule)

    found: list[Violation] = []
    check = model.check

    def stop() -> bool:
        violations = check(world)
        if violations:
            found.extend(violations)
            return True
        return False

    report: Report | None = None
    final = False
    try:
        world.run(max_steps=config.max_steps, until_ms=config.until_ms, stop=stop)
        if not found:
            injector.disarm()
            network.heal_all()
            model.quiesce()
            trace.record(world.now_ms, "settle", "world", "*", f"faults healed, no new work for {config.settle_ms} ms")
            world.run(until_ms=world.now_ms + config.settle_ms, stop=stop)
        if not found:
            final = True
            report = model.finish(world)
            found.extend(report.violations)
    except Livelock as exc:  # a real node would spin on the same deadline: a finding, not a hung sweep
        found.append(Violation(LIVELOCK, str(exc)))
    except Exception as exc:  # the system under test raised where it should have answered: that is a finding
        found.append(Violation(UNHANDLED, f"{type(exc).__name__}: {exc} ({_where(exc)})"))
    failure = None
    if found:
        first = found[0]
        failure = Failure(first.invariant, first.message, world.steps, world.now_ms, final)
        trace.record(world.now_ms, "violation", "world", "*", f"{first.invariant}: {first.message}")
    counters = {**model.counters(), **dict(sorted(network.counters.items()))}
    return SimResult(config, schedule, world.steps, world.now_ms, trace.hexdigest, trace.lines, failure,
                     checks=world.steps, invariants=dict(model.INVARIANTS), counters=counters,
                     faults_applied=injector.applied, report=report)
