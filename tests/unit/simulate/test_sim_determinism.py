"""Same seed, same run: the trace hash is the same in-process, across processes and hash seeds."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from txnsim.simulate.faults import FAULT_KINDS, parse_kinds, plan_faults
from txnsim.simulate.simulation import SimConfig, simulate

ROOT = Path(__file__).resolve().parents[3]
CONFIG = SimConfig(seed=11, until_ms=3_000)


def test_the_same_seed_gives_the_same_trace_hash_twice_in_one_process():
    first, second = simulate(CONFIG), simulate(CONFIG)
    assert first.trace_hash == second.trace_hash
    assert (first.steps, first.counters) == (second.steps, second.counters)
    assert first.faults_applied > 0 and first.counters["transactions committed"] > 0


def test_the_same_seed_gives_the_same_trace_hash_in_a_process_with_another_hash_seed():
    script = ("from txnsim.simulate.simulation import SimConfig, simulate; "
              "print(simulate(SimConfig(seed=11, until_ms=3_000)).trace_hash)")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=60)
    assert out.stdout.strip() == simulate(CONFIG).trace_hash


def test_different_seeds_give_different_hashes():
    hashes = {simulate(SimConfig(seed=seed, until_ms=1_000)).trace_hash for seed in range(1, 6)}
    assert len(hashes) == 5


def test_a_kept_trace_hashes_to_the_same_value_as_a_hash_only_run():
    kept = simulate(SimConfig(seed=4, until_ms=1_000, keep_trace=True))
    assert kept.trace_hash == simulate(SimConfig(seed=4, until_ms=1_000)).trace_hash
    assert kept.trace_lines and all(line[:9].isdigit() for line in kept.trace_lines)


def test_selecting_more_fault_kinds_leaves_the_faults_of_the_others_in_place():
    nodes, actors = ["n0", "n1", "n2"], ["n0", "n1", "n2", "c0"]
    crashes_only = plan_faults(5, ["crash"], nodes, actors, 60_000)
    everything = plan_faults(5, FAULT_KINDS, nodes, actors, 60_000)
    assert crashes_only and [f for f in everything if f.kind == "crash"] == crashes_only
    assert {f.kind for f in everything} == set(FAULT_KINDS)
    assert parse_kinds("pause,crash") == ("crash", "pause") and parse_kinds("none") == ()


def test_a_workload_without_faults_runs_clean():
    result = simulate(SimConfig(seed=2, faults=(), until_ms=2_000))
    assert result.failure is None and result.schedule == () and result.counters["transactions aborted"] >= 0
