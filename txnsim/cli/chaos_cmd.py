"""`txnsim chaos`: a read-process-write workload under a nemesis, then Jepsen's checks.

Starts its own cluster, prints the fault schedule drawn from --seed (the same seed gives
the same schedule), shows progress while the faults run, and ends with one row per anomaly.
Exit code 0 when the check found nothing, 1 otherwise.
"""
from __future__ import annotations

import argparse
import logging
import random
from pathlib import Path

from txnsim.chaos.checker import ANOMALIES, MEANINGS
from txnsim.chaos.nemesis import FAULT_KINDS
from txnsim.chaos.report import LiveDisplay, schedule_table, verdict
from txnsim.chaos.runner import ChaosConfig, run_chaos
from txnsim.cli.common import (
    add_cluster_shape_args,
    console,
    exits_cleanly,
    non_negative_int,
    partition_count_arg,
    positive_float,
    positive_int,
)
from txnsim.report import chaos_report, report_path, write_report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = sub.add_parser("chaos", help="nemesis + checker: faults injected, anomalies counted",
                           description="Copy chaos-in to chaos-out in transactions while nodes are killed, paused "
                                       "and restarted; then count anomalies with Jepsen's names.",
                           epilog="anomalies: " + "; ".join(f"{name}: {MEANINGS[name]}" for name in ANOMALIES))
    chaos.add_argument("--duration", type=positive_float, default=60.0, help="seconds of faults and workload (default 60)")
    chaos.add_argument("--nodes", type=positive_int, default=3, help="node processes (default 3)")
    chaos.add_argument("--seed", type=non_negative_int, default=None, help="seed of the fault schedule (default: random, printed)")
    chaos.add_argument("--faults", type=_fault_kinds, default=("kill", "pause"),
                       help=f"comma-separated kinds from {','.join(FAULT_KINDS)}, or none (default kill,pause); partition "
                            "and zookeeper cut a node off from its peers and the ZooKeeper, or from the ZooKeeper "
                            "alone (--namespaces)")
    chaos.add_argument("--fault-interval-ms", type=positive_int, default=3_000,
                       help="mean time between faults (default 3000); a kill keeps its node down 1-2 s, a "
                            "pause 1-4 s (past the 2 s session timeout its logs move and it is fenced)")
    chaos.add_argument("--abort-ratio", type=_ratio, default=0.1,
                       help="share of transactions aborted on purpose (default 0.1)")
    chaos.add_argument("--partitions", type=partition_count_arg, default=3, help="partitions of chaos-in and chaos-out (default 3)")
    chaos.add_argument("--workers", type=positive_int, default=2, help="read-process-write workers (default 2)")
    chaos.add_argument("--records", type=positive_int, default=None,
                       help="stop generating after this many input records (default: for the whole duration)")
    add_cluster_shape_args(chaos, "the partition and zookeeper faults need it (on either, topics are written "
                                  "with acks=all and min.insync.replicas 2)")
    chaos.add_argument("--unclean-leader-election", action="store_true",
                       help="let a replica outside the ISR lead when no ISR member lives (Kafka's "
                            "unclean.leader.election.enable): the run shows what that loses")
    chaos.add_argument("--data-dir", type=Path, default=None,
                       help="an empty directory for the cluster's files, kept afterwards (default: a temp dir)")
    chaos.add_argument("--report", type=Path, default=None,
                       help="where to write the HTML report (default: chaos-report.html in --data-dir, or in a "
                            "new temp dir)")
    chaos.set_defaults(func=run_chaos_command)


def _fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip() and k.strip() != "none")
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault kind {unknown[0]!r}; choose from {', '.join(FAULT_KINDS)}")
    return kinds


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


@exits_cleanly
def run_chaos_command(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    config = ChaosConfig(duration_s=args.duration, nodes=args.nodes, seed=seed, faults=args.faults,
                         fault_interval_ms=args.fault_interval_ms, abort_ratio=args.abort_ratio,
                         partitions=args.partitions, workers=args.workers, records=args.records,
                         data_dir=args.data_dir, replicated=args.replicated, namespaces=args.namespaces,
                         unclean_leader_election=args.unclean_leader_election)
    config.validate()
    report = report_path(args.report, args.data_dir, "chaos-report.html")
    console.print(schedule_table(config.schedule(), seed))
    root = logging.getLogger()
    if args.log_level.upper() == "WARNING":
        # the clients warn at every retry while nodes are down; the run counts errors itself
        root.setLevel(logging.ERROR)
    with LiveDisplay(console, config.duration_s) as display:
        run = run_chaos(config, display)
    console.print(verdict(run))
    console.print(f"report: {write_report(chaos_report(run), report)}", markup=False, soft_wrap=True)
    assert run.result is not None
    return 0 if run.result.valid and run.final.complete else 1
