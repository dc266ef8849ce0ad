"""What every command shares: finding the cluster, the console, and turning errors into exit codes.

Invariant: a command ends with exit code 0, or 1 and one `error:` line on stderr, never a
Python traceback; text that came from users or the cluster is printed literally, not as markup.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coordinator.layout import ClusterLayout, read_cluster_spec
from coordinator.membership import node_is_alive
from proto.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from txnsim.admin import Admin

console = Console(highlight=False, emoji=False)
err_console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

DEFAULT_DATA_DIR = Path("./txnsim-data")

#: how long a command waits for the cluster: short enough that a wrong address fails fast
DEFAULT_REQUEST_TIMEOUT_MS = 10_000


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", help="host:port[,host:port...] (default: the cluster in --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help="data directory of a `txnsim cluster start` cluster (default: ./txnsim-data)")
    parser.add_argument("--request-timeout-ms", type=_positive_int, default=DEFAULT_REQUEST_TIMEOUT_MS,
                        help=f"give up when the cluster does not answer within this long "
                             f"(default {DEFAULT_REQUEST_TIMEOUT_MS})")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def bootstrap_servers(args: argparse.Namespace) -> str:
    if args.bootstrap_servers:
        return args.bootstrap_servers
    layout = ClusterLayout(args.data_dir)
    if not layout.cluster_file.exists():
        raise SystemExit(f"error: no cluster at {args.data_dir} (start one with `txnsim cluster start "
                         f"--data-dir {args.data_dir}`, or pass --bootstrap-servers)")
    spec = read_cluster_spec(layout)
    # A live node holds its lock file; without this check a stopped cluster costs a full timeout.
    if not any(node_is_alive(layout, node_id) for node_id in spec.node_ids):
        raise SystemExit(f"error: the cluster in {args.data_dir} is not running (no node process holds its lock); "
                         f"start it with `txnsim cluster start --data-dir {args.data_dir}`")
    return spec.bootstrap_servers


def admin_client(args: argparse.Namespace) -> Admin:
    """An Admin for the cluster the command names, with the command's (short) request timeout."""
    return Admin(bootstrap_servers(args), request_timeout_ms=args.request_timeout_ms)


def exits_cleanly(command: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
    """A KafkaError becomes one red line with Kafka's error name and exit code 1, never a traceback."""
    @functools.wraps(command)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return command(args) or 0
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            error(f"{type(exc).__name__}: {exc} (is a cluster running at "
                  f"{getattr(args, 'bootstrap_servers', None) or getattr(args, 'data_dir', '?')}? "
                  "see `txnsim cluster status`)")
            return 1
        except KafkaError as exc:
            error(f"{type(exc).__name__}: {exc}")
            return 1
        except ValueError as exc:  # e.g. an empty --bootstrap-servers
            error(str(exc))
            return 1
        except BrokenPipeError:
            # the reader went away (`txnsim consume t | head`): quiet, like other Unix tools
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 1
        except KeyboardInterrupt:
            return 130
    return wrapper


def error(message: str) -> None:
    """One `error:` line on stderr; `message` is printed literally (it may hold user text)."""
    err_console.print(f"[red]error:[/red] {escape(message)}")


def print_data(line: str) -> None:
    """One line of data exactly as given, to stdout: no markup, wrapping or tab expansion, so that
    scripts can `cut -f` and `grep` it (rich's console would expand the tabs)."""
    sys.stdout.write(line + "\n")


def read_stdin_lines() -> list[bytes]:
    return [line.rstrip(b"\n") for line in sys.stdin.buffer]
