"""`txnsim ui`: the live web view of a running cluster, served on loopback."""
from __future__ import annotations

import argparse
from pathlib import Path

from coordinator.layout import ClusterLayout
from txnsim.cli.common import DEFAULT_DATA_DIR, console, exits_cleanly


def port_number(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, not {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = sub.add_parser("ui", help="serve a live web view of a running cluster on loopback (Ctrl-C stops it)")
    ui.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                    help="data directory of a `txnsim cluster start` cluster (default: ./txnsim-data)")
    ui.add_argument("--port", type=port_number, default=8080, help="port on 127.0.0.1 (default 8080; 0 picks a free one)")
    ui.add_argument("--interval-ms", type=int, default=1000, choices=range(100, 60_001), metavar="100..60000",
                    help="how often the page and the sampler refresh (default 1000)")
    ui.set_defaults(func=serve_ui)


@exits_cleanly
def serve_ui(args: argparse.Namespace) -> int:
    from txnsim.ui.server import bind, serve_forever, url  # starlette and uvicorn load only for this command
    if not ClusterLayout(args.data_dir).cluster_file.exists():
        raise SystemExit(f"error: no cluster at {args.data_dir} (start one with `txnsim cluster start "
                         f"--data-dir {args.data_dir}`, or pass its --data-dir)")
    sock = bind(args.port)
    console.print(f"txnsim web view: [bold]{url(sock)}[/bold] (cluster in {args.data_dir}); Ctrl-C stops it",
                  soft_wrap=True)
    serve_forever(args.data_dir, sock, interval_s=args.interval_ms / 1000)
    return 0
