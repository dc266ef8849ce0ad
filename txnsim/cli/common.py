"""What every command shares: finding the cluster, the console, and turning errors into exit codes."""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from coordinator.layout import ClusterLayout, read_cluster_spec
from proto.errors import KafkaError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

DEFAULT_DATA_DIR = Path("./txnsim-data")


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", help="host:port[,host:port...] (default: the cluster in --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help="data directory of a `txnsim cluster start` cluster (default: ./txnsim-data)")


def bootstrap_servers(args: argparse.Namespace) -> str:
    if args.bootstrap_servers:
        return args.bootstrap_servers
    layout = ClusterLayout(args.data_dir)
    if not layout.cluster_file.exists():
        raise SystemExit(f"error: no cluster at {args.data_dir} (start one with `txnsim cluster start "
                         f"--data-dir {args.data_dir}`, or pass --bootstrap-servers)")
    return read_cluster_spec(layout).bootstrap_servers


def exits_cleanly(command: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
    """A KafkaError becomes one red line with Kafka's error name and exit code 1, never a traceback."""
    @functools.wraps(command)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return command(args) or 0
        except KafkaError as exc:
            err_console.print(f"[red]error:[/red] {type(exc).__name__}: {exc}")
            return 1
        except KeyboardInterrupt:
            return 130
    return wrapper


def read_stdin_lines() -> list[bytes]:
    return [line.rstrip(b"\n") for line in sys.stdin.buffer]
