"""Before/after of a code change: the same producer workloads run by an older source tree and by this one,
interleaved round by round, so an optimisation is judged by the ratio of two runs from the same minute.

Each variant runs in a process of its own (PYTHONPATH = its tree), on a 3-node cluster of its own, the
measuring script (code_run.py) the same for all: the older tree is a `git archive` of the given revision.
Variants: the older revision; this tree with one request in flight per connection (so one batch in flight
per partition: what the per-record work alone gained); this tree as configured by default. The older tree's
mypyc modules (setup.py, if the revision has one) are built for it first, as this tree's are: otherwise the
older nodes and clients would run them interpreted and the change would look larger than it is.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txnsim.bench import code_run
from txnsim.bench.chart_spec import RatioBars, RatioSeries
from txnsim.bench.harness import NullProgress, Progress
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import median, median_confidence_interval, paired_ratios

THIS_TREE = Path(__file__).resolve().parents[2]
RUN_SCRIPT = Path(code_run.__file__).resolve()
#: the issue's rate targets (records/s, txnsim's own producer, 100-byte records)
TARGET_RATE = 150_000
#: each scenario table's chart (`txnsim bench --plot`)
CODE_CHART = RatioBars((RatioSeries("ratio to before", "95% CI of ratio"),),
                       value_label="records/s over the older code's (same round)")


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    tree: Path
    settings: dict[str, Any]


@contextmanager
def exported(revision: str) -> Iterator[Path]:
    """The source tree of `revision` (a commit of this repository) in a temp dir."""
    with tempfile.TemporaryDirectory(prefix="txnsim-before-") as tmp:
        archive = subprocess.run(["git", "-C", str(THIS_TREE), "archive", revision], capture_output=True)
        if archive.returncode != 0:
            raise SystemExit(f"error: cannot export revision {revision!r}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def build_compiled(tree: Path) -> str | None:
    """Build the tree's mypyc modules in place, as scripts/setup.sh does for this one; what went wrong, if
    anything (None: built, or the revision compiles nothing)."""
    if not (tree / "setup.py").exists():
        return None
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        return done.stderr.strip()[-500:] or f"setup.py build_ext exited with {done.returncode}"
    return None


def run_variant(variant: Variant, scenarios: tuple[str, ...], seconds: float, run_id: str) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(variant.tree))
    done = subprocess.run([sys.executable, str(RUN_SCRIPT), f"{seconds:g}", run_id, json.dumps(variant.settings),
                           *scenarios], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{variant.label}: the measuring run failed:\n{done.stderr[-2000:]}")
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(before: str, seconds: float = 2.0, repeat: int = 3, scenarios: tuple[str, ...] = tuple(code_run.SCENARIOS),
        progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    with exported(before) as before_tree:
        progress.phase(f"building {before}'s compiled modules", 1)
        problem = build_compiled(before_tree)
        if problem is not None:
            print(f"warning: {before}'s compiled modules did not build, it runs them interpreted: {problem}",
                  file=sys.stderr)
        progress.advance()
        variants = (Variant(f"before ({before})", before_tree, {}),
                    Variant("after, 1 request in flight per connection", THIS_TREE,
                            {"max_in_flight_requests_per_connection": 1}),
                    Variant("after (default: up to 5 batches of a partition in flight)", THIS_TREE, {}))
        runs: dict[str, list[dict[str, dict[str, float]]]] = {v.label: [] for v in variants}
        progress.phase(f"before/after: {len(variants)} variants x {repeat} rounds x {len(scenarios)} scenarios "
                       f"x {seconds:g} s", len(variants) * repeat)
        for round_ in range(repeat):
            for variant in rotated(variants, round_):
                runs[variant.label].append(run_variant(variant, scenarios, seconds, f"{round_}-{len(runs)}"))
                progress.advance()
    baseline = variants[0].label
    tables = tuple(scenario_table(name, runs, baseline, seconds, repeat) for name in scenarios)
    return BenchResult("code", tables, verdicts(runs, variants[-1].label, baseline, scenarios))


def scenario_table(scenario: str, runs: dict[str, list[dict[str, dict[str, float]]]], baseline: str, seconds: float,
                   repeat: int) -> ResultTable:
    base_rates = [r[scenario]["records_per_s"] for r in runs[baseline]]
    rows = []
    for label, variant_runs in runs.items():
        rates = [r[scenario]["records_per_s"] for r in variant_runs]
        pairs = paired_ratios(rates, base_rates)
        cpu = median([r[scenario]["client_cpu_us_per_record"] for r in variant_runs])
        rows.append((label, format_count(median(rates)), format_ratio(median(pairs)),
                     "%.3f .. %.3f" % median_confidence_interval(pairs), f"{cpu:.2f}"))
    partitions, per_records, per_seconds = code_run.SCENARIOS[scenario]
    what = (f"a commit every {per_records:,} records, round-robin over {partitions} partitions" if per_records else
            f"a commit every {per_seconds * 1000:g} ms, {partitions} partitions" if per_seconds else
            f"idempotent, no transaction, {partitions} partitions")
    return ResultTable(
        f"Before/after, {scenario}: txnsim's own producer, 100-byte records, {what}; {seconds:g} s per run, "
        f"median of {repeat} interleaved rounds",
        ("code", "records/s", "ratio to before", "95% CI of ratio", "client CPU µs/record"),
        tuple(rows),
        ("Each round runs every variant once, in rotated order, each in a process and on a 3-node cluster of "
         "its own; the ratio is the median over rounds of the variant's rate over the older code's in the same "
         "round. records/s counts acknowledged (committed) records over the run, final flush or commit included. "
         "client CPU: CPU-seconds of the producer's process per record.",), chart=CODE_CHART)


def verdicts(runs: dict[str, list[dict[str, dict[str, float]]]], after: str, baseline: str,
             scenarios: tuple[str, ...]) -> tuple[Verdict, ...]:
    found = []
    for scenario in scenarios:
        if scenario == "peer" or scenario == "txn-10ms":
            continue  # their targets are ratios against other workloads (bench peer, bench producer)
        rate = median([r[scenario]["records_per_s"] for r in runs[after]])
        found.append(Verdict(f"txnsim's producer, {scenario}: at least {TARGET_RATE:,} records/s",
                             rate >= TARGET_RATE, f"median {rate:,.0f} records/s, {len(runs[after])} rounds"))
    return tuple(found)
