"""The simulator's replication model runs the shipping replication code (controller, partition-state watch,
ReplicaManager, ReplicaLogs, the partition leader's service) on three simulated brokers and a simulated
ZooKeeper: clean seeds under every fault kind keep its invariants, each planted replication bug is found,
with the invariant that names what its protection is for, and shrinks to a few faults."""
from __future__ import annotations

import pytest

from coordinator.controller.controller import Controller
from coordinator.partition_service import PartitionServer
from coordinator.replication.manager import ReplicaManager
from partitions import ReplicaLog
from txnsim.simulate.actors import Actors
from txnsim.simulate.faults import Fault
from txnsim.simulate.network import Network
from txnsim.simulate.replication import ReplicationModel
from txnsim.simulate.shrink import shrink
from txnsim.simulate.simulation import SimConfig, simulate
from txnsim.simulate.trace import Trace
from txnsim.simulate.world import World


def test_the_simulated_brokers_run_the_shipping_replication_code() -> None:
    world = World(1)
    trace = Trace()
    network = Network(world, Actors(world, trace), trace)
    model = ReplicationModel()
    model.setup(world, network)
    world.run(until_ms=3_000)
    broker = model.brokers["n1"]
    assert type(broker.manager) is ReplicaManager and type(broker.server) is PartitionServer
    assert type(broker.controller) is Controller
    assert broker.logs and all(type(log) is ReplicaLog and log.storage is model.disk for log in broker.logs.values())
    assert sum(len(acked) for acked in model.acked.values()) > 50


@pytest.mark.parametrize("seed", range(1, 9))
def test_clean_seeds_keep_every_invariant_under_every_fault_kind(seed: int) -> None:
    result = simulate(SimConfig(seed=seed, model="replication"))
    assert result.failure is None, f"seed {seed}: {result.failure}"
    assert result.faults_applied > 0 and result.counters["acknowledged"] > 100


@pytest.mark.parametrize(("bug", "seed", "faults", "invariant"), [
    ("hw-from-leader-alone", 1, ("crash",), "hw-within-isr"),
    # the old leader comes back from a partition of the store with a tail its new leader never had
    ("no-follower-truncation", 2, ("partition", "crash"), "replicas-agree"),
    ("acks-before-isr", 2, ("partition", "crash"), "acked-kept"),
])
def test_every_planted_replication_bug_is_found_and_shrinks(bug: str, seed: int, faults: tuple[str, ...],
                                                           invariant: str) -> None:
    found = simulate(SimConfig(seed=seed, model="replication", bug=bug, faults=faults))
    assert found.failure is not None and found.failure.invariant == invariant
    shrunk = shrink(found, max_runs=24)
    assert shrunk.result.failed and len(shrunk.result.schedule) <= max(3, len(found.schedule) // 2)


#: what seed 35 with every fault kind shrinks to (28 faults, 100 runs): node 2's clock goes back, node 3 is
#: paused past its session (it leaves the ISR), node 1 crashes while node 2's fsyncs are slow
UNCLEAN_SCHEDULE = (
    Fault(2690, "clock-jump", "n2", (("jump_ms", -49684),)),
    Fault(7215, "pause", "n3", (("duration_ms", 1662),)),
    Fault(8019, "slow-fsync", "n2", (("extra_ms", 167), ("duration_ms", 569))),
    Fault(8361, "crash", "n1", (("down_ms", 1857),)),
)


def test_unclean_election_loses_acknowledged_writes_and_clean_election_does_not() -> None:
    """seed 35 is the one of seeds 1..40 where no ISR member is alive when a leader is needed."""
    assert simulate(SimConfig(seed=35, model="replication", bug="unclean-election")).failure is not None
    unclean = simulate(SimConfig(seed=35, model="replication", bug="unclean-election", schedule=UNCLEAN_SCHEDULE))
    assert unclean.failure is not None and unclean.failure.invariant == "acked-kept"
    clean = simulate(SimConfig(seed=35, model="replication", schedule=UNCLEAN_SCHEDULE))
    assert clean.failure is None, clean.failure
