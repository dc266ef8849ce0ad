"""The simulated control plane declares nodes dead as the real nodes' heartbeats would: a crashed node after
the detection delay, a paused one only once its pause outlasts the session timeout."""
from __future__ import annotations

from txnsim.simulate.actors import ActorState
from txnsim.simulate.cluster.control_plane import DETECTION_MS, ControlPlane


def states(**down: ActorState) -> dict[str, ActorState]:
    return {name: down.get(name, ActorState.UP) for name in ControlPlane.nodes()}


def test_a_crashed_node_leaves_the_view_after_the_detection_delay() -> None:
    control = ControlPlane(None, session_timeout_ms=1_000)
    control.went_down(1, now_ms=100)
    now = states(n1=ActorState.CRASHED)
    assert control.next_view(100 + DETECTION_MS, now.__getitem__) is None
    assert control.next_view(101 + DETECTION_MS, now.__getitem__) == frozenset({0, 2})
    assert control.owner_now("sim", 1) in (0, 2)


def test_a_paused_node_stays_in_the_view_until_its_pause_outlasts_the_session() -> None:
    control = ControlPlane(None, session_timeout_ms=1_000)
    control.went_down(2, now_ms=0)
    paused = states(n2=ActorState.PAUSED)
    assert control.next_view(1_000, paused.__getitem__) is None
    assert control.next_view(1_001, paused.__getitem__) == frozenset({0, 1})
    control.came_back(2)
    assert control.next_view(1_002, states().__getitem__) == frozenset({0, 1, 2})


def test_producer_id_blocks_and_member_ids_never_repeat() -> None:
    control = ControlPlane(None, session_timeout_ms=1_000)
    first, second = control.reserve_producer_ids(), control.reserve_producer_ids()
    assert first[1] <= second[0]
    assert control.new_member_id("c", None) != control.new_member_id("c", None)
