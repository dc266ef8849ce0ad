"""Entry point of the `txnsim` console script."""
from __future__ import annotations

import argparse
import logging
import sys

from txnsim.cli import (bench_cmd, chaos_cmd, cluster_cmd, demo_cmd, dump_log_cmd, groups_cmd, io_cmd, pipeline_cmd,
                        simulate_cmd, topics_cmd, transactions_cmd, ui_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="txnsim", description="Run, break and watch Kafka-style transactions.")
    parser.add_argument("--log-level", default="WARNING", help="client-side logging (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (cluster_cmd, topics_cmd, io_cmd, transactions_cmd, groups_cmd, dump_log_cmd, demo_cmd, pipeline_cmd,
                   chaos_cmd, bench_cmd, simulate_cmd, ui_cmd):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
