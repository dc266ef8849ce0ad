"""The nemesis: the fault schedule is a function of the seed, faults never overlap, all heal."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import wait_until
from txnsim.chaos.history import FaultEvent, History
from txnsim.chaos.nemesis import FAULT_KINDS, Nemesis, plan_faults
from txnsim.chaos.runner import ChaosConfig


def test_the_same_seed_gives_the_same_schedule():
    config = ChaosConfig(duration_s=60, seed=1, faults=("kill", "pause", "restart"))
    assert config.schedule() == config.schedule()
    assert config.schedule() == ChaosConfig(duration_s=60, seed=1, faults=("restart", "pause", "kill")).schedule()
    assert len(config.schedule()) >= 10


def test_different_seeds_give_different_schedules():
    schedules = {tuple(ChaosConfig(duration_s=60, seed=seed).schedule()) for seed in range(20)}
    assert len(schedules) == 20


def test_the_seed_alone_decides_the_schedule_not_the_global_random_state():
    import random
    random.seed(1)
    first = plan_faults(7, 30, [0, 1, 2], ["kill", "pause"], 2.0)
    random.seed(2)
    assert plan_faults(7, 30, [0, 1, 2], ["kill", "pause"], 2.0) == first


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31), duration=st.floats(1, 300), interval=st.floats(0.1, 10),
       kinds=st.sets(st.sampled_from(FAULT_KINDS), min_size=1), nodes=st.integers(1, 5))
def test_faults_never_overlap_and_all_heal_before_the_end(seed, duration, interval, kinds, nodes):
    schedule = plan_faults(seed, duration, list(range(nodes)), sorted(kinds), interval)
    healed_at = 0.0
    for fault in schedule:
        assert fault.at_s >= healed_at, "a fault started before the previous node healed"
        assert fault.kind in kinds and 0 <= fault.node < nodes
        assert (fault.heal_after_s == 0) == (fault.kind == "restart")
        healed_at = fault.at_s + fault.heal_after_s
        assert healed_at <= duration - 1.0


def test_unknown_fault_kinds_are_refused():
    with pytest.raises(ValueError, match="unknown fault kind"):
        plan_faults(1, 10, [0], ["kill", "split-brain"], 1.0)


class FakeCluster:
    """Records what the nemesis does and how many nodes are down at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.down: set[int] = set()
        self.most_down = 0
        self.calls: list[tuple[str, int]] = []

    def _do(self, verb: str, node: int, down: bool) -> None:
        with self.lock:
            self.calls.append((verb, node))
            (self.down.add if down else self.down.discard)(node)
            self.most_down = max(self.most_down, len(self.down))

    def kill(self, node: int) -> None:
        self._do("kill", node, True)

    def pause(self, node: int) -> None:
        self._do("pause", node, True)

    def restart(self, node: int) -> None:
        self._do("restart", node, False)

    def resume(self, node: int) -> None:
        self._do("resume", node, False)

    node_ids = [0, 1, 2]

    def partition(self, *groups, one_way=False) -> None:
        (node,), (rest,) = groups[0], groups[1:]
        others = sorted(map(str, set(self.node_ids) - {node}))
        verb = {("zookeeper",): "zookeeper", (*others, "zookeeper"): "partition", tuple(others): "isr-loss"}[
            tuple(sorted(map(str, rest)))]
        self._do(verb, node, True)

    def heal(self) -> None:
        with self.lock:
            down = sorted(self.down)
        for node in down:
            self._do("heal", node, False)


def test_the_nemesis_carries_out_the_schedule_one_node_at_a_time():
    one_node = [kind for kind in FAULT_KINDS if kind != "isr-loss"]  # isr-loss takes the two others down
    schedule = plan_faults(3, 2.0, [0, 1, 2], one_node, 0.1, heal_s=(0.01, 0.03), quiet_tail_s=0.1)
    assert len(schedule) >= 5
    cluster, history = FakeCluster(), History()
    nemesis = Nemesis(cluster, schedule, history, history.now())
    nemesis.start()
    nemesis.join(timeout=30)
    assert not nemesis.is_alive()
    heal = {"kill": "restart", "restart": "restart", "pause": "resume", "partition": "heal", "zookeeper": "heal"}
    expected = [step for f in schedule for step in ((f.kind if f.kind != "restart" else "kill", f.node),
                                                     (heal[f.kind], f.node))]
    assert cluster.calls == expected
    assert cluster.most_down == 1 and not cluster.down
    injected = [(e.kind, e.node) for e in history.events() if isinstance(e, FaultEvent) and e.phase == "inject"]
    assert injected == [(f.kind, f.node) for f in schedule]


def test_a_stopped_nemesis_heals_the_node_it_broke():
    schedule = plan_faults(5, 600, [0, 1, 2], ["kill"], 0.01, heal_s=(300, 300))
    cluster, history = FakeCluster(), History()
    nemesis = Nemesis(cluster, schedule, history, history.now())
    nemesis.start()
    wait_until(lambda: cluster.down, what="the first kill")
    nemesis.stop()
    nemesis.join(timeout=10)
    assert not nemesis.is_alive() and not cluster.down
    assert cluster.calls == [("kill", schedule[0].node), ("restart", schedule[0].node)]


def test_isr_loss_cuts_a_node_off_then_kills_the_others_and_restarts_them_at_the_heal(monkeypatch):
    import txnsim.chaos.nemesis as nemesis_module
    monkeypatch.setattr(nemesis_module, "ISR_LOSS_CUT_S", 0.01)
    fault = nemesis_module.Fault(0.0, "isr-loss", 1, 0.05)
    cluster, history = FakeCluster(), History()
    nemesis = Nemesis(cluster, [fault], history, history.now())
    nemesis.start()
    nemesis.join(timeout=10)
    assert cluster.calls[:3] == [("isr-loss", 1), ("kill", 0), ("kill", 2)]
    assert ("heal", 1) in cluster.calls[3:] and cluster.calls[-2:] == [("restart", 0), ("restart", 2)]
