"""The planted bugs of the demo model are found, shrunk, written to a trace file and replayed."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from txnsim.simulate.demo import DemoModel
from txnsim.simulate.shrink import ddmin, shrink
from txnsim.simulate.simulation import SimConfig, SimResult, simulate
from txnsim.simulate.sweep import parse_seeds, sweep
from txnsim.simulate.trace import load_trace, save_trace

#: every bug must be found within this many seeds of the default options
SEEDS_TO_FIND = 30


def first_failure(bug: str) -> SimResult:
    for seed in range(1, SEEDS_TO_FIND + 1):
        result = simulate(SimConfig(seed=seed, model="demo", bug=bug))
        if result.failed:
            return result
    raise AssertionError(f"bug {bug} not found in {SEEDS_TO_FIND} seeds")


@pytest.mark.parametrize("bug", list(DemoModel.BUGS))
def test_every_planted_bug_is_found_within_a_bounded_number_of_seeds(bug: str):
    assert first_failure(bug).failure is not None


def test_the_correct_model_survives_the_same_seeds():
    outcomes = sweep(SimConfig(seed=0, model="demo"), range(1, 11), jobs=1).outcomes
    assert [o.seed for o in outcomes if o.failed] == []


def test_a_found_violation_shrinks_to_fewer_faults_that_still_fail_the_same_way():
    failed = first_failure("ack-before-fsync")
    shrunk = shrink(failed, max_runs=60)
    assert shrunk.result.failure is not None
    assert shrunk.result.failure.invariant == failed.failure.invariant  # type: ignore[union-attr]
    assert 1 <= shrunk.faults_after < shrunk.faults_before
    # what is left takes the coordinator down: its crash, or the whole cluster's power loss
    assert any((f.kind == "crash" and f.target == "n0") or f.kind == "power-loss" for f in shrunk.result.schedule)
    assert shrunk.runs <= 61
    assert shrink(failed, max_runs=60).config == shrunk.config  # shrinking is deterministic too


def test_the_saved_trace_file_replays_to_the_same_hash_and_violation(tmp_path: Path):
    shrunk = shrink(first_failure("ack-before-fsync"), max_runs=40)
    kept = simulate(replace(shrunk.config, keep_trace=True))
    path = tmp_path / "run.trace.jsonl"
    save_trace(path, {"config": kept.replay_config().to_json(), "trace_hash": kept.trace_hash}, kept.trace_lines)
    saved = load_trace(path)
    replayed = simulate(SimConfig.from_json(saved.header["config"]))
    assert replayed.trace_hash == kept.trace_hash == saved.header["trace_hash"]
    assert replayed.failure == kept.failure and replayed.failure is not None
    assert saved.lines == kept.trace_lines


def test_a_sweep_in_worker_processes_gives_the_hashes_of_runs_in_this_process():
    template = SimConfig(seed=0, model="demo", until_ms=1_000)
    parallel = sweep(template, [1, 2, 3, 4], jobs=2).outcomes
    assert [o.trace_hash for o in parallel] == [simulate(replace(template, seed=s)).trace_hash for s in (1, 2, 3, 4)]


def test_ddmin_finds_the_one_fault_that_matters():
    items = list(range(16))
    assert ddmin(items, lambda subset: 11 in subset) == [11]  # type: ignore[arg-type]
    assert ddmin(items, lambda subset: {3, 12} <= set(subset)) == [3, 12]  # type: ignore[arg-type]


def test_seed_ranges_lists_and_single_seeds_parse():
    assert parse_seeds("1..5") == [1, 2, 3, 4, 5]
    assert parse_seeds("5") == [5]
    assert parse_seeds("9,1,7,1") == [1, 7, 9]
    with pytest.raises(ValueError, match="ends before it starts"):
        parse_seeds("5..1")

