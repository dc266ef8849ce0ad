"""The planted bugs are one enumeration, switched on only by the simulator: no shipping code compares a bug's
name or reads a fault from the environment, and every bug is offered by one model (the cluster model, or the
replication model for replication's)."""
from __future__ import annotations

import re
from pathlib import Path

from proto.planted_bugs import DESCRIPTIONS, REPLICATION_BUGS, PlantedBug
from txnsim.simulate.cluster.model import ClusterModel
from txnsim.simulate.replication import ReplicationModel

ROOT = Path(__file__).resolve().parents[3]
#: the packages a node and the clients are made of (the simulator, txnsim/simulate, may name bugs)
SHIPPING = ["client", "consumer", "coordinator", "partitions", "producer", "proto", "spark",
            *[str(p.relative_to(ROOT)) for p in (ROOT / "txnsim").iterdir() if p.name != "simulate"]]


def test_every_planted_bug_is_offered_by_exactly_one_model_with_its_description():
    offered = {**ClusterModel.BUGS, **ReplicationModel.BUGS}
    assert not set(ClusterModel.BUGS) & set(ReplicationModel.BUGS)
    assert set(offered) == {bug.value for bug in PlantedBug}
    assert set(ReplicationModel.BUGS) == {bug.value for bug in REPLICATION_BUGS}
    assert set(DESCRIPTIONS) == set(PlantedBug)
    assert all(offered[bug.value] == DESCRIPTIONS[bug] for bug in PlantedBug)


def test_no_shipping_code_switches_a_planted_bug_by_its_name_or_a_fault_by_the_environment():
    names = re.compile("|".join([re.escape(f'"{bug.value}"') for bug in PlantedBug] + ["TXNSIM_FAULT"]))
    found = []
    for package in SHIPPING:
        path = ROOT / package
        for source in [path] if path.is_file() else path.rglob("*.py"):
            if source.suffix != ".py" or source.name == "planted_bugs.py":
                continue
            for number, line in enumerate(source.read_text().splitlines(), 1):
                if names.search(line):
                    found.append(f"{source.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "planted bugs named outside the simulator:\n" + "\n".join(found)
