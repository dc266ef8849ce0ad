"""Ownership: the placement every node computes alike, the liveness it is computed over (node locks and
heartbeat counters in real files), and what a node lets go of when it changes (coordinator/reconcile.py)."""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from coordinator.layout import ClusterLayout
from coordinator.membership import Heartbeat, Membership
from coordinator.placement import NO_OWNER, Placement
from coordinator.reconcile import logs_to_release
from tests.helpers import wait_until


def test_each_log_has_one_preferred_owner_and_moves_to_the_next_live_node_around_the_ring():
    placement = Placement((0, 1, 2))
    assert [placement.owner("__transaction_state", shard) for shard in range(6)] == [0, 1, 2, 0, 1, 2]
    preferred = placement.owner("orders", 0)
    assert placement.owner("orders", 0, live={0, 1, 2} - {preferred}) == (preferred + 1) % 3
    assert placement.owner("orders", 0, live=set()) == NO_OWNER
    # a topic's partitions are spread over every node, and every node computes the same answer
    assert {placement.owner("orders", p) for p in range(3)} == {0, 1, 2}
    assert Placement((0, 1, 2)).owned_by(1, "orders", 6) == placement.owned_by(1, "orders", 6)


@dataclass
class FakeLog:
    """What reconcile reads of an open log; `fenced` stands for a later epoch claimed in the log's files."""

    topic: str
    partition: int
    fenced: bool = False


def test_a_node_releases_logs_placed_elsewhere_and_drops_fenced_ones_even_if_they_came_back():
    mine, moved, fenced = FakeLog("t", 0), FakeLog("t", 1), FakeLog("__transaction_state", 2, fenced=True)
    owners = {("t", 0): 7, ("t", 1): 8, ("__transaction_state", 2): 7}
    plan = logs_to_release([mine, moved, fenced], lambda topic, p: owners[(topic, p)], 7)
    assert plan == [(fenced, "fenced"), (moved, "released")]


def _hold_lock(layout: ClusterLayout, node_id: int) -> int:
    layout.nodes.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.node_lock(node_id), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_node_whose_heartbeat_stands_still_is_counted_out_and_one_whose_lock_is_free_at_once(tmp_path):
    layout = ClusterLayout(tmp_path)
    locks = {node: _hold_lock(layout, node) for node in (0, 1, 2)}
    beats = {node: Heartbeat(layout, node, interval_s=0.02) for node in (0, 1, 2)}
    membership = Membership(layout, [0, 1, 2], own_node_id=0, probe_interval_s=0.02, start_up_grace_s=0.0,
                            session_timeout_s=0.3)

    def refreshed_live() -> frozenset[int]:
        for node in (0, 2):  # node 1 stalls: its counter stands still, its lock is held (a paused process)
            beats[node].beat()
        membership.refresh()
        return membership.live

    assert refreshed_live() == {0, 1, 2}
    wait_until(lambda: refreshed_live() == {0, 2}, timeout_s=5, what="the stalled node counted out")
    assert membership.may_cut_off(1) and not membership.may_cut_off(0)
    os.close(locks.pop(2))  # node 2's process died: the kernel released its lock
    wait_until(lambda: refreshed_live() == {0}, timeout_s=5, what="the dead node counted out")
    beats[1].beat()
    wait_until(lambda: 1 in refreshed_live(), timeout_s=5, what="the stalled node back once it beats again")
    for fd in locks.values():
        os.close(fd)
