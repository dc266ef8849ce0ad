"""What a node lets go of when ownership changes: one rule for the real node and the simulator.

A log is released when the placement names another owner, and dropped as fenced when a later
leader epoch was claimed for it meanwhile (this node was paused or cut off while another took the
log over, perhaps already handing it back): its in-memory state is stale even if the placement
names this node again, so it is reopened (and reloaded) at a new epoch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar


class OwnedLog(Protocol):
    topic: str
    partition: int

    @property
    def fenced(self) -> bool: ...


L = TypeVar("L", bound=OwnedLog)


def logs_to_release(open_logs: Iterable[L], owner: Callable[[str, int], int], node_id: int) -> list[tuple[L, str]]:
    """(log, "fenced" or "released") for every open log this node must close, in a stable order."""
    out = []
    for log in sorted(open_logs, key=lambda log: (log.topic, log.partition)):
        fenced = log.fenced
        if owner(log.topic, log.partition) == node_id and not fenced:
            continue
        out.append((log, "fenced" if fenced else "released"))
    return out
