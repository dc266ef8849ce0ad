"""What every command shares: finding the cluster, the console, and turning errors into exit codes.

Invariant: a command ends with exit code 0, or 1 and one `error:` line on stderr, never a
Python traceback; text that came from users or the cluster is printed literally, not as markup.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coordinator.layout import ClusterLayout, node_layout, read_cluster_spec
from coordinator.membership import node_is_alive
from proto.errors import (
    BrokerResponseError,
    ErrorClass,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_class_of,
)
from txnsim.admin import Admin

console = Console(highlight=False, emoji=False)
err_console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

DEFAULT_DATA_DIR = Path("./txnsim-data")

#: how long a command waits for the cluster: short enough that a wrong address fails fast
DEFAULT_REQUEST_TIMEOUT_MS = 10_000


#: environment variables that stand in for --data-dir and --bootstrap-servers (as KAFKA_* do in many images)
DATA_DIR_ENV = "TXNSIM_DATA_DIR"
BOOTSTRAP_SERVERS_ENV = "TXNSIM_BOOTSTRAP_SERVERS"


def stop_on_interrupt() -> None:
    """Let Ctrl-C and SIGTERM raise KeyboardInterrupt, for commands that run until stopped: a shell starting
    a command in the background (`txnsim cluster start &`, a script, a test runner) hands it SIGINT ignored,
    and SIGTERM (kill, systemd, CI) would otherwise end it without its clean-up."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def default_data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def add_data_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=default_data_dir(),
                        help=f"data directory of a `txnsim cluster start` cluster (default: ${DATA_DIR_ENV}, "
                             f"else {DEFAULT_DATA_DIR})")


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get(BOOTSTRAP_SERVERS_ENV) or None,
                        help=f"host:port[,host:port...] (default: ${BOOTSTRAP_SERVERS_ENV}, else the cluster in "
                             "--data-dir)")
    add_data_dir_arg(parser)
    parser.add_argument("--request-timeout-ms", type=positive_int, default=DEFAULT_REQUEST_TIMEOUT_MS,
                        help=f"give up when the cluster does not answer within this long "
                             f"(default {DEFAULT_REQUEST_TIMEOUT_MS})")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (one document on stdout) instead of a table")


def _int_at_least(minimum: int, error_name: str) -> Callable[[str], int]:
    """An argparse type: an integer >= minimum, or one line naming Kafka's error for it."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"[{error_name}] {text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"[{error_name}] must be at least {minimum}, not {value}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


#: numeric arguments: each refuses what the cluster would refuse, before asking it
positive_int = _int_at_least(1, "INVALID_REQUEST")
non_negative_int = _int_at_least(0, "INVALID_REQUEST")
offset_arg = _int_at_least(0, "INVALID_REQUEST")
partition_arg = _int_at_least(0, "UNKNOWN_TOPIC_OR_PARTITION")
partition_count_arg = _int_at_least(1, "INVALID_PARTITIONS")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"[INVALID_REQUEST] {text!r} is not a number") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"[INVALID_REQUEST] must be above 0, not {text}")
    return value


def add_cluster_shape_args(parser: argparse.ArgumentParser, what: str = "") -> None:
    """--replicated and --namespaces: the shape of the embedded cluster a command starts (LocalCluster's);
    `what`: a last sentence for --namespaces (what needs it)."""
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--replicated", action="store_true",
                       help="a replicated cluster: each node its own directory and three replicas of every log, a "
                            "controller on ZooKeeper")
    shape.add_argument("--namespaces", action="store_true",
                       help="a replicated cluster with every node and the ZooKeeper on a host of its own (a Linux "
                            "network namespace; root and nftables)" + (f"; {what}" if what else ""))


def port_arg(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"[INVALID_REQUEST] a port is 0..65535, not {value}")
    return value


def bootstrap_servers(args: argparse.Namespace) -> str:
    given: str | None = args.bootstrap_servers
    if given:
        return given
    layout = ClusterLayout(args.data_dir)
    if not layout.cluster_file.is_file():
        raise SystemExit(f"error: no cluster at {args.data_dir} (start one with `txnsim cluster start "
                         f"--data-dir {args.data_dir}`, or pass --bootstrap-servers)")
    spec = read_cluster_spec(layout)
    # A live node holds its lock file; without this check a stopped cluster costs a full timeout.
    if not any(node_is_alive(node_layout(layout, spec, node_id), node_id) for node_id in spec.node_ids):
        raise SystemExit(f"error: the cluster in {args.data_dir} is not running (no node process holds its lock); "
                         f"start it with `txnsim cluster start --data-dir {args.data_dir}`")
    return spec.bootstrap_servers


def admin_client(args: argparse.Namespace) -> Admin:
    """An Admin for the cluster the command names, with the command's (short) request timeout."""
    return Admin(bootstrap_servers(args), request_timeout_ms=args.request_timeout_ms)


@contextlib.contextmanager
def scratch_dir(given: Path | None, prefix: str, what: str) -> Iterator[Path]:
    """`given`, or a new temporary directory that is removed afterwards unless the run failed; either way the
    user is told where the files are (or were)."""
    path = given or Path(tempfile.mkdtemp(prefix=prefix))
    ok = False
    try:
        yield path
        ok = True
    finally:
        if given is not None:
            console.print(f"{what} kept in {escape(str(path))}")
        elif ok:
            shutil.rmtree(path, ignore_errors=True)
            console.print(f"removed the temporary {what} in {escape(str(path))} (pass --data-dir to keep them)")
        else:
            console.print(f"{what} left in {escape(str(path))} for a look (remove it when done)")


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
            # a node's answer also says what kind of error it is (KIP-1050) and what helps; a fatal one
            # has nothing to add, since the command has ended, and neither has an error raised here
            kind = error_class_of(exc)
            helps = isinstance(exc, BrokerResponseError) and kind is not ErrorClass.FATAL
            error(f"{type(exc).__name__}: {exc}" + (f" ({kind.value}: {kind.advice})" if helps else ""))
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
