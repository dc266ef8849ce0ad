"""Ownership changes of a local cluster as plain records, timed from the start of a run.

Read from DATA/metadata/ownership.log (which every node appends to) once a run is over, so
reports can show who owned which log when. Wall-clock milliseconds in the log become seconds
after a run's start, the time axis of everything else a run records.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.ownership_log import OwnershipLog

#: how many changes to read back at most (a long chaos run moves every log many times)
MAX_CHANGES = 1_000_000


@dataclass(frozen=True, slots=True)
class OwnershipChange:
    #: seconds after the run's start (negative: while the cluster was starting)
    at_s: float
    node: int
    #: "acquired", "released" or "fenced"
    action: str
    topic: str
    partition: int
    leader_epoch: int
    reason: str

    @property
    def log(self) -> str:
        """The log's name as `txnsim cluster status` shows it."""
        if self.topic == "__transaction_state":
            return f"txn shard {self.partition}"
        if self.topic == "__consumer_offsets":
            return f"offsets shard {self.partition}"
        return f"{self.topic}-{self.partition}"


def read_ownership_changes(metadata_dir: Path, started_wall_s: float) -> list[OwnershipChange]:
    """Every change recorded under `metadata_dir`, oldest first; `started_wall_s` is time.time() at the start."""
    return [OwnershipChange(round(c.time_ms / 1000 - started_wall_s, 3), c.node_id, c.action, c.topic, c.partition,
                            c.leader_epoch, c.reason)
            for c in OwnershipLog(metadata_dir).recent(limit=MAX_CHANGES)]


def owned_over_time(changes: list[OwnershipChange]) -> dict[int, list[tuple[float, int]]]:
    """node -> [(time, logs it owns from then on)], one point per change that concerned it.

    A log belongs to the node that acquired it last until that node releases it or is fenced;
    a killed node records nothing, so its logs leave it when another node acquires them.
    """
    owner: dict[tuple[str, int], int] = {}
    counts: dict[int, int] = {}
    points: dict[int, list[tuple[float, int]]] = {}

    def note(node: int, at_s: float) -> None:
        points.setdefault(node, []).append((at_s, counts.get(node, 0)))

    for c in sorted(changes, key=lambda c: c.at_s):
        key = (c.topic, c.partition)
        previous = owner.get(key)
        if c.action == "acquired":
            if previous == c.node:
                continue
            owner[key] = c.node
            counts[c.node] = counts.get(c.node, 0) + 1
            note(c.node, c.at_s)
            if previous is not None:
                counts[previous] -= 1
                note(previous, c.at_s)
        elif previous == c.node:  # released or fenced by its owner
            del owner[key]
            counts[c.node] -= 1
            note(c.node, c.at_s)
    return points
