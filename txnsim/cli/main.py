"""Entry point of the `txnsim` console script."""
# PYTHON_ARGCOMPLETE_OK  (argcomplete's marker: `eval "$(register-python-argcomplete txnsim)"` completes quickly)
from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

import argcomplete

from txnsim.cli import (
    bench_cmd,
    chaos_cmd,
    cluster_cmd,
    demo_cmd,
    dump_log_cmd,
    groups_cmd,
    io_cmd,
    pipeline_cmd,
    simulate_cmd,
    topics_cmd,
    transactions_cmd,
    ui_cmd,
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Parser(argparse.ArgumentParser):
    """argparse, with its error as the command's own usage and then one `error:` line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {self.prog}: {message}\n")


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"[INVALID_CONFIG] unknown log level {text!r}; one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def _version() -> str:
    try:
        return version("txnsim")
    except PackageNotFoundError:  # run from a clone without `pip install -e .`
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="txnsim", description="Run, break and watch Kafka-style transactions.")
    parser.add_argument("--version", action="version", version=f"txnsim {_version()}")
    parser.add_argument("--log-level", type=_log_level, default="WARNING",
                        help=f"client-side logging: {', '.join(LOG_LEVELS)} (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (cluster_cmd, topics_cmd, io_cmd, transactions_cmd, groups_cmd, dump_log_cmd, demo_cmd, pipeline_cmd,
                   chaos_cmd, bench_cmd, simulate_cmd, ui_cmd):
        module.register(sub)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser as its default `_parser`, so that stray flags are reported with the usage of
    the command they were given to, not the top level's."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _remember_parsers(child)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)
    args, extra = parser.parse_known_args(argv)
    if extra:
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
