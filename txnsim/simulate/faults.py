"""The fault schedule as plain data: what goes wrong, where and when, drawn from the seed.

A schedule is an explicit, sorted list of `Fault`s so it can be printed, saved in a trace
file, replayed as it is and shrunk. Each fault kind draws from its own random stream, so
selecting more kinds with `--faults` leaves the faults of the others exactly where they
were. Parameters are integers (probabilities in per mille) so a schedule is the same text
on every machine.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from txnsim.simulate.world import derive_seed

#: every kind, in the order they are planned and listed
FAULT_KINDS = ("net-delay", "drop", "dup", "reorder", "late", "partition", "crash", "pause", "bitflip", "slow-fsync",
               "clock-jump", "power-loss")
#: the requests a "late" fault holds back (param `what` indexes this): KAFKA-17754's schedules
LATE_MESSAGES = ("ProduceRequest", "EndTxnRequest", "WriteTxnMarkersRequest")

MEANINGS = {
    "net-delay": "every message on the target's links arrives extra_ms later, for duration_ms",
    "drop": "per_mille of the messages on the target's links are lost, for duration_ms",
    "dup": "per_mille of the messages on the target's links arrive twice, for duration_ms",
    "reorder": "per_mille of the messages get a delay spike of up to extra_ms and overtake, for duration_ms",
    "late": "per_mille of one kind of request (what: 0 Produce, 1 EndTxn, 2 WriteTxnMarkers) on the target's links "
            "arrive extra_ms late, after their sender gave up on them, for duration_ms (KAFKA-17754's schedules)",
    "partition": "the target is cut off from everyone (oneway=1: only its outgoing links), for duration_ms",
    "crash": "the target node crashes (volatile state and unsynced writes lost) and restarts after down_ms",
    "pause": "the target node stops (SIGSTOP) for duration_ms, longer than a session timeout",
    "bitflip": "one bit of the target node's stored data flips (position drawn from flip_seed)",
    "slow-fsync": "the target node's fsyncs take extra_ms more, for duration_ms",
    "clock-jump": "the target node's local clock jumps by jump_ms (the world's clock does not)",
    "power-loss": "every node loses power at once (paused ones too): each loses what it wrote without an fsync, "
                  "and all restart after down_ms",
}

#: kinds whose target is a node that can crash; the others target links (an actor or "*")
NODE_KINDS = frozenset({"crash", "pause", "bitflip", "slow-fsync", "clock-jump"})

#: mean time between two faults of one kind, in simulated milliseconds
DEFAULT_INTERVAL_MS = 4_000


@dataclass(frozen=True, slots=True)
class Fault:
    at_ms: int
    kind: str
    target: str
    params: tuple[tuple[str, int], ...] = ()

    def param(self, name: str, default: int = 0) -> int:
        for key, value in self.params:
            if key == name:
                return value
        return default

    @property
    def duration_ms(self) -> int:
        return self.param("down_ms") if self.kind in ("crash", "power-loss") else self.param("duration_ms")

    def describe(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.kind} {self.target}" + (f" {shown}" if shown else "")

    def to_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "kind": self.kind, "target": self.target, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fault:
        kind = str(data["kind"])
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} in schedule")
        params = tuple((str(k), int(v)) for k, v in dict(data.get("params", {})).items())
        return cls(int(data["at_ms"]), kind, str(data["target"]), params)


def parse_kinds(text: str) -> tuple[str, ...]:
    """`all`, `none`, or a comma-separated list of kinds; ValueError names the first unknown one."""
    text = text.strip()
    if text == "all":
        return FAULT_KINDS
    if text in ("none", ""):
        return ()
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind {unknown[0]!r}; choose from all, none, {', '.join(FAULT_KINDS)}")
    return tuple(k for k in FAULT_KINDS if k in kinds)


def plan_faults(seed: int, kinds: Iterable[str], nodes: Sequence[str], actors: Sequence[str], horizon_ms: int,
                *, session_timeout_ms: int = 1_000, interval_ms: int = DEFAULT_INTERVAL_MS) -> list[Fault]:
    """The schedule of `kinds` from time 0 to `horizon_ms`, sorted by time (then kind, target)."""
    selected = set(kinds)
    faults: list[Fault] = []
    for kind in FAULT_KINDS:
        if kind not in selected:
            continue
        rng = random.Random(derive_seed(seed, f"faults.{kind}"))
        if kind in NODE_KINDS:
            targets = list(nodes)
        elif kind == "late":  # every request a late fault holds back goes to or comes from a node
            targets = ["*", *nodes]
        elif kind == "power-loss":  # the whole machine room
            targets = ["*"]
        else:
            targets = ["*", *actors]
        at = rng.randint(interval_ms // 4, interval_ms)
        while at < horizon_ms and targets:
            faults.append(Fault(at, kind, rng.choice(targets), _params(kind, rng, session_timeout_ms)))
            at += rng.randint(interval_ms // 2, interval_ms * 3 // 2)
    return sorted(faults, key=lambda f: (f.at_ms, FAULT_KINDS.index(f.kind), f.target))


def _params(kind: str, rng: random.Random, session_timeout_ms: int) -> tuple[tuple[str, int], ...]:
    if kind == "net-delay":
        return (("extra_ms", rng.randint(20, 300)), ("duration_ms", rng.randint(500, 3_000)))
    if kind in ("drop", "dup"):
        return (("per_mille", rng.randint(50, 500)), ("duration_ms", rng.randint(200, 2_000)))
    if kind == "reorder":
        return (("per_mille", rng.randint(100, 500)), ("extra_ms", rng.randint(10, 200)),
                ("duration_ms", rng.randint(500, 3_000)))
    if kind == "late":
        # half just past a node's 500 ms request timeout (the copy lands while the retry's successor is
        # open: KAFKA-19446's window), half long after everyone moved on
        extra = rng.randint(500, 700) if rng.random() < 0.5 else rng.randint(1_000, 3_000)
        return (("what", rng.randrange(len(LATE_MESSAGES))), ("per_mille", rng.randint(100, 600)),
                ("extra_ms", extra), ("duration_ms", rng.randint(500, 3_000)))
    if kind == "partition":
        return (("duration_ms", rng.randint(300, 3_000)), ("oneway", rng.randint(0, 1)))
    if kind in ("crash", "power-loss"):
        return (("down_ms", rng.randint(100, 2_000)),)
    if kind == "pause":
        return (("duration_ms", rng.randint(session_timeout_ms + 1, 3 * session_timeout_ms)),)
    if kind == "bitflip":
        return (("flip_seed", rng.randrange(2**31)),)
    if kind == "slow-fsync":
        return (("extra_ms", rng.randint(5, 200)), ("duration_ms", rng.randint(500, 3_000)))
    if kind == "clock-jump":
        jump = rng.randint(100, 60_000)
        return (("jump_ms", jump if rng.random() < 0.5 else -jump),)
    raise ValueError(f"unknown fault kind {kind!r}")


def schedule_to_json(schedule: Iterable[Fault]) -> list[dict[str, Any]]:
    return [f.to_json() for f in schedule]


def schedule_from_json(data: Iterable[Mapping[str, Any]]) -> list[Fault]:
    return sorted((Fault.from_json(d) for d in data), key=lambda f: (f.at_ms, FAULT_KINDS.index(f.kind), f.target))
