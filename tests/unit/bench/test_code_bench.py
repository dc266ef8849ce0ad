"""The before/after benchmark's tables and verdicts from given runs (no cluster: the measuring runs are
exercised by `txnsim bench code`)."""
from __future__ import annotations

from txnsim.bench import code_bench


def runs_at(*rates: float) -> list[dict[str, dict]]:
    return [{name: {"records_per_s": rate, "client_cpu_us_per_record": 1e6 / rate} for name in ("idempotent",)}
            for rate in rates]


def test_each_variant_is_a_ratio_to_the_older_code_of_the_same_round():
    runs = {"before": runs_at(100.0, 50.0, 80.0), "after": runs_at(200.0, 150.0, 160.0)}
    table = code_bench.scenario_table("idempotent", runs, "before", 2.0, 3)
    rows = {row[0]: row for row in table.rows}
    assert rows["before"][2].startswith("1.000")
    assert rows["after"][2].startswith("2.000")  # ratios 2.0, 3.0, 2.0: the median of the rounds, not of the rates
    assert rows["after"][1] == "160"


def test_the_rate_target_is_judged_on_the_current_code():
    runs = {"before": runs_at(100_000.0), "after": runs_at(160_000.0)}
    (verdict,) = code_bench.verdicts(runs, "after", "before", ("idempotent",))
    assert verdict.met and "160,000" in verdict.detail


def test_an_older_tree_without_setup_py_builds_nothing_and_a_failed_build_says_why(tmp_path):
    assert code_bench.build_compiled(tmp_path) is None  # revisions before the mypyc modules: nothing to build
    (tmp_path / "setup.py").write_text("raise SystemExit('no compiler here')\n")
    assert "no compiler here" in code_bench.build_compiled(tmp_path)
