"""What both demo services take on their command line, and how they log (to stderr, which the runner
keeps in the service's log file)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def parse_service_args(argv: list[str] | None, *, name: str, description: str | None,
                       default_group: str, group_help: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--client", choices=("native", "rocketmq"), default="native")
    parser.add_argument("--bootstrap-servers", help="txnsim's address list (native client)")
    parser.add_argument("--endpoints", help="RocketMQ endpoints 'host:port;host:port' (rocketmq client)")
    parser.add_argument("--group", default=default_group, help=group_help)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {name}[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    return args
